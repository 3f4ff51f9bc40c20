"""Score every live agent for one query in a single numpy pass. Pure: no I/O, no clock.

Two semantic numbers per agent come from `CapabilityIndex.scores` (see `mesh.router.index`):
the *rank* score (centred cosine, the head's log-probability and lexical coverage; it tells
agents apart best, but its scale depends on who else is registered) and the absolute
*similarity* (raw cosine to the agent's own centroid and lexical coverage; it depends on
the agent's own texts only, so one calibrated threshold holds in a mesh of 3 agents or
of 3,000).
``total = w_semantic * rank + keyword + w_load * (1 - load/max) + w_idle * idle
+ w_history * success_rate + priority_bonus * priority``. An agent is *eligible* when it
is routable, matches the required tags, and ``similarity + keyword`` clears the
threshold. Among eligible agents the best total wins; when the runner-up is within
`tie_margin` the two are arbitrated by similarity, then lower load, then success rate.
A cold agent close to the winner is given the task instead when its cold-start quota is
owed (`mesh.router.coldstart`: at least `exploration_share` of the tasks it is close on,
until it completed `cold_start_completions`); the caller's `QuotaView` holds the counts,
so decisions replay deterministically.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from mesh.config import Settings, default_of
from mesh.router.coldstart import QuotaView, contenders, owed
from mesh.router.index import AgentStats, CapabilityIndex

__all__ = [
    "AgentStats",
    "Candidate",
    "Decision",
    "ScoreWeights",
    "score",
]

F32 = NDArray[np.float32]
Strategy = Literal["best", "arbitrated", "explore", "none"]

#: filtered reasons, in the order they are checked
UNAVAILABLE = "unavailable"
TAGS = "tags"
BELOW_THRESHOLD = "below_threshold"

_EPS = 1e-6


#: `ScoreWeights` fields that are settings of the same name (their defaults are read there)
SETTINGS_FIELDS: tuple[str, ...] = (
    "w_semantic",
    "w_load",
    "w_idle",
    "w_history",
    "keyword_boost",
    "tie_margin",
    "exploration_share",
    "cold_start_completions",
    "cold_start_margin",
)


_setting = default_of


@dataclass(frozen=True)
class ScoreWeights:
    """The knobs of `score`; build with `ScoreWeights.from_settings`. The defaults of the
    `SETTINGS_FIELDS` are the settings' own."""

    threshold: float
    w_semantic: float = _setting("w_semantic")
    w_load: float = _setting("w_load")
    w_idle: float = _setting("w_idle")
    w_history: float = _setting("w_history")
    keyword_boost: float = _setting("keyword_boost")
    tie_margin: float = _setting("tie_margin")
    exploration_share: float = _setting("exploration_share")
    #: an agent with fewer completed tasks is cold and has a quota
    cold_start_completions: int = _setting("cold_start_completions")
    #: how close to the best a cold agent must be for a task to count towards its quota
    cold_start_margin: float = _setting("cold_start_margin")
    #: added per priority level (agents register an integer priority, default 0)
    priority_bonus: float = 0.02
    #: seconds of idleness that earn the full idle part
    idle_horizon_s: float = 60.0

    @classmethod
    def from_settings(cls, settings: Settings, *, threshold: float) -> ScoreWeights:
        """Weights from `settings`; `threshold` is already resolved (see `calibrate`)."""
        return cls(threshold=threshold, **{f: getattr(settings, f) for f in SETTINGS_FIELDS})


@dataclass(frozen=True)
class Candidate:
    """One agent's score parts for one decision (weighted, so they add up to `total`)."""

    agent_id: str
    similarity: float
    semantic: float
    keyword: float
    load: float
    idle: float
    history: float
    priority: float
    total: float
    #: why the agent could not be chosen (`unavailable`, `tags`, `below_threshold`)
    filtered: str | None

    def as_dict(self) -> dict[str, float | str | None]:
        return {
            "agent_id": self.agent_id,
            "similarity": round(self.similarity, 4),
            "semantic": round(self.semantic, 4),
            "keyword": round(self.keyword, 4),
            "load": round(self.load, 4),
            "idle": round(self.idle, 4),
            "history": round(self.history, 4),
            "priority": round(self.priority, 4),
            "total": round(self.total, 4),
            "filtered": self.filtered,
        }


@dataclass(frozen=True)
class Decision:
    """The outcome of `score`: the chosen agent (or None) and every candidate's parts.

    Per-agent parts are kept as arrays; `candidates()` builds `Candidate` objects on
    demand, so a decision over 10,000 agents stays cheap until it is explained.
    """

    agent_id: str | None
    strategy: Strategy
    threshold: float
    ids: tuple[str, ...]
    similarity: F32
    semantic: F32
    keyword: F32
    load: F32
    idle: F32
    history: F32
    priority: F32
    total: F32
    #: 0 eligible, 1 unavailable, 2 tags, 3 below threshold
    filter_code: NDArray[np.int8]
    #: runner-up within the tie margin, when arbitration happened (the best, on "explore")
    runner_up: str | None = None
    #: the cold agents close on this task, whose quota counts it (`mesh.router.coldstart`)
    contested: tuple[str, ...] = ()

    @property
    def eligible(self) -> NDArray[np.bool_]:
        out: NDArray[np.bool_] = self.filter_code == 0
        return out

    @cached_property
    def order(self) -> NDArray[np.intp]:
        """Rows ranked: eligible first, then by total, descending."""
        return np.lexsort((-self.total, self.filter_code != 0))

    def candidate(self, row: int) -> Candidate:
        code = int(self.filter_code[row])
        return Candidate(
            agent_id=self.ids[row],
            similarity=float(self.similarity[row]),
            semantic=float(self.semantic[row]),
            keyword=float(self.keyword[row]),
            load=float(self.load[row]),
            idle=float(self.idle[row]),
            history=float(self.history[row]),
            priority=float(self.priority[row]),
            total=float(self.total[row]),
            filtered=(None, UNAVAILABLE, TAGS, BELOW_THRESHOLD)[code],
        )

    def candidates(self, limit: int | None = None) -> list[Candidate]:
        """Ranked candidates with their parts (all of them when `limit` is None)."""
        rows = self.order if limit is None else self.order[:limit]
        # one conversion per array (the values `candidate` gives, row by row)
        columns = zip(
            rows.tolist(),
            self.similarity[rows].tolist(),
            self.semantic[rows].tolist(),
            self.keyword[rows].tolist(),
            self.load[rows].tolist(),
            self.idle[rows].tolist(),
            self.history[rows].tolist(),
            self.priority[rows].tolist(),
            self.total[rows].tolist(),
            self.filter_code[rows].tolist(),
            strict=True,
        )
        filters = (None, UNAVAILABLE, TAGS, BELOW_THRESHOLD)
        return [
            Candidate(self.ids[row], sim, sem, kw, load, idle, hist, prio, total, filters[code])
            for row, sim, sem, kw, load, idle, hist, prio, total, code in columns
        ]

    def bid_candidates(self, k: int) -> list[str]:
        """The `k` available, tag-matching agents with the highest similarity (for bids)."""
        ok = np.flatnonzero(self.filter_code != 1) if k else np.empty(0, np.intp)
        ok = ok[(self.filter_code[ok] != 2) & (self.similarity[ok] > -1.0)]
        top = ok[np.argsort(-self.similarity[ok], kind="stable")[:k]]
        return [self.ids[int(r)] for r in top]

    def best_similarity(self) -> float:
        """Highest similarity among available, tag-matching agents (-1 when none)."""
        ok = (self.filter_code == 0) | (self.filter_code == 3)
        return float(self.similarity[ok].max()) if ok.any() else -1.0


def score(
    index: CapabilityIndex,
    query: F32,
    weights: ScoreWeights,
    *,
    query_text: str = "",
    required_tags: Mapping[str, str] | None = None,
    quota: QuotaView | None = None,
    blocked: NDArray[np.bool_] | None = None,
    routable: NDArray[np.bool_] | None = None,
) -> Decision:
    """Score every agent of `index` for the unit vector `query`; see the module docstring.

    `quota` holds the cold agents' counts; without one no cold agent is given a task.
    `blocked` marks rows that may not be chosen now (excluded, breaker open, lease
    lapsed): they count as unavailable. `routable` marks the rows that may be chosen at
    all (default: the index's routable rows, the live agents). Pure: the index is only
    read.
    """
    n = len(index)
    available = index.routable if routable is None else routable
    if blocked is not None:
        available = available & ~blocked
    tagged = index.tag_mask(required_tags) if required_tags else None
    rank, sim = index.scores(query, query_text, available if tagged is None else available & tagged)
    kw = (
        index.keyword_hits(query_text) * np.float32(weights.keyword_boost)
        if query_text and weights.keyword_boost
        else np.zeros(n, np.float32)
    )
    load, idle, history, priority = _stats_parts(index, weights)
    semantic = (weights.w_semantic * rank).astype(np.float32, copy=False)
    # summed left to right, as ``semantic + kw + load + idle + history + priority``
    total = semantic + kw
    total += load
    total += idle
    total += history
    total += priority

    code = np.zeros(n, np.int8)
    code[(sim + kw) < weights.threshold] = 3
    if tagged is not None:
        code[~tagged] = 2
    code[~available] = 1

    def decision(
        agent_id: str | None,
        strategy: Strategy,
        runner_up: str | None = None,
        contested: tuple[str, ...] = (),
    ) -> Decision:
        return Decision(
            agent_id,
            strategy,
            weights.threshold,
            index.ids,
            sim,
            semantic,
            kw,
            load,
            idle,
            history,
            priority,
            total,
            code,
            runner_up,
            contested,
        )

    eligible = np.flatnonzero(code == 0)
    if eligible.size == 0:
        return decision(None, "none")
    if eligible.size > 2:
        eligible_top = eligible[np.argpartition(-total[eligible], 1)[:2]]
    else:
        eligible_top = eligible
    ranked = eligible_top[np.argsort(-total[eligible_top], kind="stable")]
    best = int(ranked[0])
    strategy: Strategy = "best"
    runner_up: str | None = None
    if ranked.size > 1 and total[best] - total[int(ranked[1])] <= weights.tie_margin:
        second = int(ranked[1])
        runner_up = index.ids[second]
        strategy = "arbitrated"
        if _prefer(second, best, rank, index):
            best, runner_up = second, index.ids[best]

    if quota is not None and weights.exploration_share > 0 and weights.cold_start_completions:
        rows = contenders(
            index.completed,
            sim + kw,
            total,
            code,
            best,
            threshold=weights.threshold,
            margin=weights.cold_start_margin,
            completions=weights.cold_start_completions,
        )
        if rows.size:
            contested = tuple(index.ids[int(r)] for r in rows)
            pick = owed(quota, index.ids, rows, best, weights.exploration_share)
            if pick is not None:
                return decision(index.ids[pick], "explore", index.ids[best], contested)
            return decision(index.ids[best], strategy, runner_up, contested)
    return decision(index.ids[best], strategy, runner_up)


#: weights whose stats parts an index keeps at most (`_stats_parts`)
_PARTS_KEPT = 8


def _stats_parts(index: CapabilityIndex, weights: ScoreWeights) -> tuple[F32, F32, F32, F32]:
    """The weighted load, idle, history and priority parts of every row: they depend on the
    stats alone, so they are computed once per change of them (`stats_version`), not per
    query (a batch of queries embedded together is scored with no dispatch between)."""
    version = index.stats_version
    kept = index.derived.get(weights)
    if kept is not None and kept[0] == version:
        return kept[1]  # type: ignore[return-value]
    free = 1.0 - np.minimum(index.load / index.max_concurrency, 1.0)
    load = (weights.w_load * free).astype(np.float32)
    idle = (weights.w_idle * np.minimum(index.idle_s / weights.idle_horizon_s, 1.0)).astype(
        np.float32
    )
    history = (weights.w_history * index.success_rate).astype(np.float32)
    priority = (weights.priority_bonus * index.priority).astype(np.float32)
    parts = (load, idle, history, priority)
    for part in parts:
        part.flags.writeable = False  # shared by every decision until the stats change
    if len(index.derived) >= _PARTS_KEPT:
        index.derived.clear()
    index.derived[weights] = (version, parts)
    return parts


def _prefer(a: int, b: int, sim: F32, index: CapabilityIndex) -> bool:
    """Arbitration: does row `a` beat row `b`? Semantic rank, then lower load, then success."""
    if abs(float(sim[a]) - float(sim[b])) > _EPS:
        return bool(sim[a] > sim[b])
    la = index.load[a] / index.max_concurrency[a]
    lb = index.load[b] / index.max_concurrency[b]
    if abs(float(la - lb)) > _EPS:
        return bool(la < lb)
    return bool(index.success_rate[a] > index.success_rate[b])
