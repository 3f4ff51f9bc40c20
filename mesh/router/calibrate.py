"""Calibration: measure routing on a labelled set with the live router's own scoring code.

`run_calibration` builds a `CapabilityIndex` from registrations, feeds optional learning
rows through `CapabilityIndex.learn` (the live learning path), refits, then routes every
labelled text with `scoring.score` and reports top-1 accuracy, the threshold that best
separates in-scope from out-of-scope texts, AUROC and the most overlapping agent pairs.

`default_threshold(model_id)` (in `mesh.router.thresholds`) is the table the router uses when
``Settings.similarity_threshold`` is None.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from mesh.errors import CalibrationDataError
from mesh.router.embedding import Embedder
from mesh.router.index import CapabilityIndex, FitConfig, embed_registration
from mesh.router.scoring import ScoreWeights, score

# re-exported: `mesh calibrate` and its tests read the shipped thresholds from here
from mesh.router.thresholds import DEFAULT_THRESHOLDS as DEFAULT_THRESHOLDS
from mesh.router.thresholds import GENERIC_THRESHOLD as GENERIC_THRESHOLD
from mesh.router.thresholds import default_threshold as default_threshold
from mesh.router.thresholds import resolve_threshold as resolve_threshold

if TYPE_CHECKING:
    from mesh.config import Settings

logger = logging.getLogger(__name__)

Progress = Callable[[str], None]


# --- input files -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Registration:
    agent_id: str
    capability_text: str
    examples: tuple[str, ...] = ()
    tags: dict[str, str] = field(default_factory=dict)
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class Labelled:
    text: str
    #: None: out of scope (no agent should take it)
    expected: str | None


def _str_list(value: Any, where: str, name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise CalibrationDataError(f"{where}: {name!r} must be a list of strings")
    return tuple(value)


def load_agents(path: Path) -> list[Registration]:
    """Read AGENTS.json: a list of registrations.

    Raises:
        CalibrationDataError: unreadable file, bad JSON or a bad entry (named by index).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CalibrationDataError(f"{path}: cannot read ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise CalibrationDataError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    if not isinstance(data, list) or not data:
        raise CalibrationDataError(f"{path}: expected a non-empty JSON list of registrations")
    out: list[Registration] = []
    seen: set[str] = set()
    for i, item in enumerate(data):
        where = f"{path}: agent #{i}"
        if not isinstance(item, dict):
            raise CalibrationDataError(f"{where}: expected an object")
        agent_id, cap = item.get("agent_id"), item.get("capability_text")
        if not isinstance(agent_id, str) or not agent_id:
            raise CalibrationDataError(f"{where}: 'agent_id' must be a non-empty string")
        if not isinstance(cap, str) or not cap.strip():
            raise CalibrationDataError(f"{where} ({agent_id}): 'capability_text' is required")
        if agent_id in seen:
            raise CalibrationDataError(f"{where}: duplicate agent_id {agent_id!r}")
        seen.add(agent_id)
        tags = item.get("tags") or {}
        if not isinstance(tags, dict):
            raise CalibrationDataError(f"{where} ({agent_id}): 'tags' must be an object")
        out.append(
            Registration(
                agent_id=agent_id,
                capability_text=cap,
                examples=_str_list(item.get("examples", []), where, "examples"),
                tags={str(k): str(v) for k, v in tags.items()},
                keywords=_str_list(item.get("keywords", []), where, "keywords"),
            )
        )
    return out


def load_labelled(path: Path, known: set[str] | None = None) -> list[Labelled]:
    """Read a JSONL file of ``{"text": ..., "expected": agent_id | null}`` lines.

    Extra keys are ignored; blank lines are skipped.

    Raises:
        CalibrationDataError: ``file:line: reason`` for the first bad line, or an
            `expected` agent missing from `known`.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise CalibrationDataError(f"{path}: cannot read ({exc.strerror})") from None
    out: list[Labelled] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise CalibrationDataError(f"{where}: invalid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise CalibrationDataError(f"{where}: expected an object")
        text, expected = item.get("text"), item.get("expected")
        if not isinstance(text, str) or not text.strip():
            raise CalibrationDataError(f"{where}: 'text' must be a non-empty string")
        if expected is not None and not isinstance(expected, str):
            raise CalibrationDataError(f"{where}: 'expected' must be an agent_id or null")
        if expected is not None and known is not None and expected not in known:
            raise CalibrationDataError(f"{where}: 'expected' names unknown agent {expected!r}")
        out.append(Labelled(text, expected))
    if not out:
        raise CalibrationDataError(f"{path}: no labelled lines")
    return out


# --- building and learning ---------------------------------------------------------------------
def build_index(
    registrations: Sequence[Registration],
    embedder: Embedder,
    *,
    memory_size: int = 50,
    fit: FitConfig | None = None,
    seed: int = 0,
) -> CapabilityIndex:
    """Embed and add every registration with its texts (as the live router's selector does)."""
    index = CapabilityIndex(embedder.dim, memory_size=memory_size, fit=fit, seed=seed)
    for reg in registrations:
        cap, examples = embed_registration(embedder, reg.capability_text, reg.examples)
        index.add(
            reg.agent_id,
            cap,
            examples,
            tags=reg.tags,
            keywords=reg.keywords,
            texts=[reg.capability_text, *reg.examples],
        )
    return index


def learn_rows(
    index: CapabilityIndex, vectors: NDArray[np.float32], rows: Sequence[Labelled]
) -> int:
    """Feed confirmed outcomes through `CapabilityIndex.learn`; returns how many were used."""
    used = 0
    for vec, row in zip(vectors, rows, strict=True):
        if row.expected is not None:
            index.learn(row.expected, vec, good=True, text=row.text)
            used += 1
    return used


# --- evaluation --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Overlap:
    a: str
    b: str
    cosine: float
    #: labelled texts of one routed to the other (both directions)
    confusions: int


@dataclass(frozen=True)
class CalibrationReport:
    agents: int
    labelled: int
    in_scope: int
    out_of_scope: int
    learned: int
    top1: float
    threshold: float
    in_scope_accuracy: float
    oos_recall: float
    auroc: float | None
    overlaps: list[Overlap]
    fitted: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def route_all(
    index: CapabilityIndex,
    vectors: NDArray[np.float32],
    texts: Sequence[str],
    weights: ScoreWeights,
) -> tuple[list[str | None], NDArray[np.float32]]:
    """Route every query with no threshold: (top agent, its similarity + keyword part)."""
    open_weights = ScoreWeights(**{**asdict(weights), "threshold": -np.inf})
    chosen: list[str | None] = []
    conf = np.zeros(len(texts), np.float32)
    for i, (vec, text) in enumerate(zip(vectors, texts, strict=True)):
        decision = score(index, vec, open_weights, query_text=text)
        chosen.append(decision.agent_id)
        if decision.agent_id is not None:
            row = index.row(decision.agent_id)
            conf[i] = decision.similarity[row] + decision.keyword[row]
    return chosen, conf


def auroc(positive: NDArray[np.float32], negative: NDArray[np.float32]) -> float | None:
    """Probability that a random positive outscores a random negative (ties count half)."""
    if positive.size == 0 or negative.size == 0:
        return None
    both = np.concatenate([positive, negative])
    order = np.argsort(both, kind="mergesort")
    ranks = np.empty(both.size, np.float64)
    ranks[order] = np.arange(1, both.size + 1)
    for value in np.unique(both):  # average ranks of ties
        same = both == value
        if same.sum() > 1:
            ranks[same] = ranks[same].mean()
    pos = ranks[: positive.size].sum() - positive.size * (positive.size + 1) / 2
    return float(pos / (positive.size * negative.size))


def choose_threshold(
    conf: NDArray[np.float32], correct: NDArray[np.bool_], in_scope: NDArray[np.bool_]
) -> tuple[float, float, float]:
    """Threshold maximising the mean of in-scope accuracy and OOS recall.

    In-scope accuracy counts a text right when its top agent is the expected one and
    clears the threshold; OOS recall is the share of out-of-scope texts that do not.
    Without OOS texts, the threshold keeps 99 % of the correct in-scope routes.
    Returns ``(threshold, in_scope_accuracy, oos_recall)``.
    """
    n_in = max(int(in_scope.sum()), 1)
    n_oos = int((~in_scope).sum())
    if n_oos == 0:
        ok = np.sort(conf[correct & in_scope])
        t = float(ok[int(0.01 * ok.size)]) if ok.size else 0.0
        return t, float(((conf >= t) & correct & in_scope).sum() / n_in), 0.0
    candidates = np.unique(conf)
    best = (-1.0, 0.0, 0.0, 0.0)
    for t in candidates:
        acc = float(((conf >= t) & correct & in_scope).sum() / n_in)
        rec = float(((conf < t) & ~in_scope).sum() / n_oos)
        if (acc + rec) / 2 > best[0] + 1e-12:
            best = ((acc + rec) / 2, float(t), acc, rec)
    return best[1], best[2], best[3]


def overlaps(
    index: CapabilityIndex,
    expected: Sequence[str | None],
    chosen: Sequence[str | None],
    k: int = 10,
) -> list[Overlap]:
    """The `k` agent pairs with the most mutual confusions, then the most similar prototypes."""
    ids = index.ids
    confusions: dict[tuple[str, str], int] = {}
    for want, got in zip(expected, chosen, strict=True):
        if want is not None and got is not None and want != got:
            pair = (min(want, got), max(want, got))
            confusions[pair] = confusions.get(pair, 0) + 1
    protos = index.prototypes
    if len(ids) > 4000:  # an (n, n) matrix past this is too big to be worth it
        cos_pairs: list[tuple[float, str, str]] = []
    else:
        sims = protos @ protos.T
        iu = np.triu_indices(len(ids), 1)
        flat = sims[iu]
        top = np.argsort(-flat)[:k]
        cos_pairs = [(float(flat[t]), ids[iu[0][t]], ids[iu[1][t]]) for t in top]
    out: dict[tuple[str, str], Overlap] = {}
    for (a, b), count in sorted(confusions.items(), key=lambda kv: -kv[1])[:k]:
        cos = float(protos[index.row(a)] @ protos[index.row(b)])
        out[(a, b)] = Overlap(a, b, round(cos, 4), count)
    for cos, a, b in cos_pairs:
        pair = (min(a, b), max(a, b))
        if len(out) >= k:
            break
        out.setdefault(pair, Overlap(pair[0], pair[1], round(cos, 4), confusions.get(pair, 0)))
    return list(out.values())


def run_calibration(
    registrations: Sequence[Registration],
    labelled: Sequence[Labelled],
    embedder: Embedder,
    settings: Settings,
    *,
    learn: Sequence[Labelled] = (),
    fit: FitConfig | None = None,
    progress: Progress | None = None,
    batch_size: int = 256,
) -> CalibrationReport:
    """Build, learn, refit, route every labelled text and report (see module docstring)."""
    say = progress or (lambda _msg: None)
    say(f"embedding {len(registrations)} agents")
    index = build_index(registrations, embedder, memory_size=settings.example_memory_size, fit=fit)
    used = 0
    if learn:
        vecs = _embed(embedder, [r.text for r in learn], batch_size, say, "learning rows")
        used = learn_rows(index, vecs, learn)
    say(f"fitting prototypes of {len(index)} agents")
    fitted = index.refit()
    texts = [r.text for r in labelled]
    vectors = _embed(embedder, texts, batch_size, say, "labelled rows")
    say(f"routing {len(texts)} labelled rows")
    weights = ScoreWeights.from_settings(settings, threshold=0.0)
    chosen, conf = route_all(index, vectors, texts, weights)
    expected = [r.expected for r in labelled]
    in_scope = np.array([e is not None for e in expected], np.bool_)
    correct = np.array([c == e for c, e in zip(chosen, expected, strict=True)], np.bool_)
    correct &= in_scope
    n_in = int(in_scope.sum())
    top1 = float(correct.sum() / n_in) if n_in else 0.0
    threshold, acc, recall = choose_threshold(conf, correct, in_scope)
    return CalibrationReport(
        agents=len(index),
        labelled=len(labelled),
        in_scope=n_in,
        out_of_scope=len(labelled) - n_in,
        learned=used,
        top1=round(top1, 4),
        threshold=round(threshold, 4),
        in_scope_accuracy=round(acc, 4),
        oos_recall=round(recall, 4),
        auroc=_round(auroc(conf[in_scope], conf[~in_scope])),
        overlaps=overlaps(index, expected, chosen),
        fitted=fitted,
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _embed(
    embedder: Embedder, texts: Sequence[str], batch: int, say: Progress, what: str
) -> NDArray[np.float32]:
    parts = []
    for start in range(0, len(texts), batch):
        if start % (batch * 8) == 0:
            say(f"embedding {what} {start}/{len(texts)}")
        parts.append(embedder.embed(texts[start : start + batch]))
    if not parts:
        return np.empty((0, embedder.dim), np.float32)
    return np.concatenate(parts).astype(np.float32, copy=False)
