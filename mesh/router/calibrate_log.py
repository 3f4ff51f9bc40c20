"""Calibration from the decision log: `mesh calibrate --from-decisions decisions.jsonl`.

Reads the observer's ``decisions.jsonl`` (one ``route.decision`` event per line, with the
listed candidates' score parts; `mesh.observer.journal`) and, optionally, the ``route.feedback``
events of its ``trace.jsonl`` (``mesh feedback TASK_ID good|bad``). For every decision the
*gate value* is what the threshold is compared with in `mesh.router.scoring`: the best
``similarity + keyword`` among the candidates that are available and match the required tags
(``filtered`` is None or ``below_threshold``).

It reports the distribution of the gate values, the no-match share (decisions whose gate
value is below the threshold they were made with) and a suggested threshold with what it
would change, replayed on the logged gate values:

* with feedback on at least `MIN_FEEDBACK` routed decisions, the threshold that maximises the
  mean of the share of good routes kept and the share of bad routes turned away
  (`mesh.router.calibrate.choose_threshold`, the rule `mesh calibrate --labelled` uses);
* otherwise the one that brings the no-match share to `target_no_match` (default 10 %: more
  turned away than that usually means the capability texts miss how users ask).

Pure apart from reading the files; no model, no broker.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mesh.errors import CalibrationDataError
from mesh.router.calibrate import choose_threshold

__all__ = [
    "LogCalibration",
    "LoggedDecision",
    "calibrate_from_log",
    "load_decisions",
    "load_feedback",
]

#: candidates the threshold was applied to (the others were unavailable or filtered by tags)
GATED = (None, "below_threshold")
#: feedback on fewer routed decisions than this does not choose the threshold
MIN_FEEDBACK = 20
#: default target share of decisions turned away when there is no feedback
TARGET_NO_MATCH = 0.10
PERCENTILES = (5, 10, 25, 50, 75, 90, 95)


@dataclass(frozen=True)
class LoggedDecision:
    task_id: str | None
    #: the agent the decision chose (None: nothing was chosen)
    agent_id: str | None
    #: the route's strategy (``semantic``, ``bid``, ``fallback``...; None: no route)
    strategy: str | None
    threshold: float
    #: the best gated ``similarity + keyword``; None when no candidate was gated
    gate: float | None


def _lines(path: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    """``(file:line, object)`` for every non-blank line of a JSON-lines file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CalibrationDataError(f"{path}: cannot read ({exc.strerror})") from None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CalibrationDataError(f"{where}: invalid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise CalibrationDataError(f"{where}: expected an object")
        yield where, item


def _gate(candidates: Any, where: str) -> float | None:
    if not isinstance(candidates, list):
        raise CalibrationDataError(f"{where}: 'data.candidates' must be a list")
    best: float | None = None
    for c in candidates:
        if not isinstance(c, dict) or c.get("filtered") not in GATED:
            continue
        sim, kw = c.get("similarity"), c.get("keyword", 0.0)
        if not isinstance(sim, int | float) or not isinstance(kw, int | float):
            raise CalibrationDataError(f"{where}: a candidate without a numeric 'similarity'")
        value = float(sim) + float(kw)
        best = value if best is None else max(best, value)
    return best


def load_decisions(path: Path) -> list[LoggedDecision]:
    """The ``route.decision`` lines of `path` (other event types are skipped).

    Raises:
        CalibrationDataError: unreadable file, bad JSON, a decision without its threshold
            or candidates (``file:line: reason``), or no decision at all.
    """
    out: list[LoggedDecision] = []
    for where, item in _lines(path):
        if item.get("type") != "route.decision":
            continue
        data = item.get("data")
        if not isinstance(data, dict):
            raise CalibrationDataError(f"{where}: 'data' must be an object")
        threshold = data.get("threshold")
        if not isinstance(threshold, int | float):
            raise CalibrationDataError(f"{where}: 'data.threshold' must be a number")
        route = data.get("route")
        strategy = route.get("strategy") if isinstance(route, dict) else None
        agent_id = item.get("agent_id")
        out.append(
            LoggedDecision(
                task_id=item.get("task_id") if isinstance(item.get("task_id"), str) else None,
                agent_id=agent_id if isinstance(agent_id, str) else None,
                strategy=strategy if isinstance(strategy, str) else None,
                threshold=float(threshold),
                gate=_gate(data.get("candidates", []), where),
            )
        )
    if not out:
        raise CalibrationDataError(f"{path}: no route.decision lines")
    return out


def load_feedback(path: Path) -> dict[tuple[str, str], bool]:
    """``(task_id, agent_id) -> good`` from the ``route.feedback`` lines of `path` (the
    observer's ``trace.jsonl``; other lines are skipped). The last verdict on a task wins.

    Raises:
        CalibrationDataError: unreadable file or bad JSON (``file:line: reason``).
    """
    out: dict[tuple[str, str], bool] = {}
    for _where, item in _lines(path):
        if item.get("type") != "route.feedback":
            continue
        task_id, agent_id = item.get("task_id"), item.get("agent_id")
        data = item.get("data")
        good = data.get("good") if isinstance(data, dict) else None
        if isinstance(task_id, str) and isinstance(agent_id, str) and isinstance(good, bool):
            out[(task_id, agent_id)] = good
    return out


@dataclass(frozen=True)
class LogCalibration:
    decisions: int
    #: decisions with at least one gated candidate (the others had no agent to compare)
    scored: int
    #: decisions per route strategy (``none``: nothing chosen)
    strategies: dict[str, int]
    current_threshold: float
    #: other thresholds found in the log (routers configured differently), with counts
    other_thresholds: dict[str, int]
    #: percentile -> gate value
    percentiles: dict[str, float]
    #: (lower edge, count) in steps of 0.05
    histogram: list[tuple[float, int]]
    no_match_share: float
    #: ``feedback`` or ``target_no_match``
    method: str
    suggested_threshold: float
    no_match_share_suggested: float
    #: decisions the suggested threshold would route that the current one turns away
    newly_routed: int
    #: decisions the current threshold routes that the suggested one would turn away
    newly_turned_away: int
    feedback_good: int
    feedback_bad: int
    #: shares of good routes kept and bad routes turned away, now and at the suggestion
    good_kept: tuple[float, float] | None
    bad_turned_away: tuple[float, float] | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _histogram(gates: NDArray[np.float64], step: float = 0.05) -> list[tuple[float, int]]:
    lows = np.floor(gates / step + 1e-9) * step  # 0.30 / 0.05 is 5.999...
    counts = Counter(round(float(x), 2) for x in lows)
    return sorted(counts.items())


def calibrate_from_log(
    decisions: Sequence[LoggedDecision],
    feedback: dict[tuple[str, str], bool] | None = None,
    *,
    target_no_match: float = TARGET_NO_MATCH,
) -> LogCalibration:
    """Distribution, no-match share and a suggested threshold (see the module docstring).

    Raises:
        CalibrationDataError: no decision had a gated candidate.
    """
    if not 0.0 <= target_no_match < 1.0:
        raise ValueError(f"target_no_match must be in [0, 1), got {target_no_match}")
    scored = [d for d in decisions if d.gate is not None]
    if not scored:
        raise CalibrationDataError("no decision lists a candidate the threshold applies to")
    thresholds = Counter(round(d.threshold, 4) for d in scored)
    current = thresholds.most_common(1)[0][0]
    gates = np.array([d.gate for d in scored], np.float64)
    no_match = float((gates < current).mean())

    votes = feedback or {}
    verdicts = [
        votes.get((d.task_id, d.agent_id)) if d.task_id and d.agent_id else None for d in scored
    ]
    rated = np.array([v is not None for v in verdicts], np.bool_)
    good = np.array([v is True for v in verdicts], np.bool_)
    if int(rated.sum()) >= MIN_FEEDBACK:
        method = "feedback"
        conf = gates[rated].astype(np.float32)
        suggested, _, _ = choose_threshold(conf, good[rated], good[rated])
    else:
        method = "target_no_match"
        suggested = float(np.quantile(gates, target_no_match, method="lower"))
    suggested = round(suggested, 4)
    good_kept = bad_away = None
    n_good, n_bad = int(good.sum()), int((rated & ~good).sum())
    if n_good:
        good_kept = (
            round(float((gates[good] >= current).mean()), 4),
            round(float((gates[good] >= suggested).mean()), 4),
        )
    if n_bad:
        bad = rated & ~good
        bad_away = (
            round(float((gates[bad] < current).mean()), 4),
            round(float((gates[bad] < suggested).mean()), 4),
        )
    return LogCalibration(
        decisions=len(decisions),
        scored=len(scored),
        strategies=dict(Counter(d.strategy or "none" for d in decisions).most_common()),
        current_threshold=current,
        other_thresholds={f"{t:g}": n for t, n in thresholds.items() if t != current},
        percentiles={f"p{p}": round(float(np.percentile(gates, p)), 4) for p in PERCENTILES},
        histogram=_histogram(gates),
        no_match_share=round(no_match, 4),
        method=method,
        suggested_threshold=suggested,
        no_match_share_suggested=round(float((gates < suggested).mean()), 4),
        newly_routed=int(((gates >= suggested) & (gates < current)).sum()),
        newly_turned_away=int(((gates < suggested) & (gates >= current)).sum()),
        feedback_good=n_good,
        feedback_bad=n_bad,
        good_kept=good_kept,
        bad_turned_away=bad_away,
    )
