"""Why a decision chose nobody (pure): the `NoMatch` of a `Decision` that has no agent.

`scoring.score` marks each agent eligible, unavailable, tag-filtered or below the
threshold, in that order of precedence: an unavailable agent's score and tags are not
looked at. `miss_of` looks at them: an agent that clears the threshold and has the tags
but is unavailable says the task was meant for it (excluded, breaker open, or no live
instance); with none such, the tags or the threshold are why.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

import numpy as np
from numpy.typing import NDArray

from mesh.router.reasons import NoMatch
from mesh.router.scoring import Decision

TagMask = Callable[[Mapping[str, str]], NDArray[np.bool_]]


def miss_of(
    decision: Decision,
    *,
    required_tags: Mapping[str, str],
    tag_mask: TagMask,
    excluded: Collection[str],
    breaker_open: Collection[str],
    last_live_ms: Callable[[str], int | None],
) -> NoMatch:
    """Why `decision` (no agent chosen) chose nobody; no fallback or bids considered."""
    ids = decision.ids
    if not ids:
        return NoMatch("no_agents", threshold=decision.threshold)
    clears = (decision.similarity + decision.keyword) >= decision.threshold
    tags_ok = tag_mask(required_tags) if required_tags else np.ones(len(ids), np.bool_)
    meant = np.flatnonzero(clears & tags_ok)
    if meant.size:
        # every agent the task was meant for is unavailable: the best one says why
        rows = meant[np.argsort(-decision.total[meant], kind="stable")]
        agents = tuple(ids[int(r)] for r in rows)
        first = agents[0]
        if first in excluded:
            return NoMatch("excluded", agents=tuple(a for a in agents if a in excluded))
        if first in breaker_open:
            return NoMatch("breaker_open", agents=(first,))
        down = tuple(a for a in agents if a not in excluded and a not in breaker_open)
        return NoMatch("no_live_instance", agents=down, last_live_ms=last_live_ms(first))
    best = _best(decision, tags_ok)
    if required_tags and (not tags_ok.any() or clears.any()):
        # the tags leave nobody, or leave out every agent that clears the threshold
        return NoMatch(
            "tags",
            threshold=decision.threshold,
            best_agent=_best(decision, clears)[0],
            tags=_excluding(required_tags, tag_mask, clears if clears.any() else None),
        )
    return NoMatch(
        "below_threshold", threshold=decision.threshold, best_agent=best[0], best_score=best[1]
    )


def _best(decision: Decision, rows: NDArray[np.bool_]) -> tuple[str | None, float | None]:
    """The agent of `rows` with the highest ``similarity + keyword`` (the threshold's
    measure), and that score."""
    measure = decision.similarity + decision.keyword
    found = np.flatnonzero(rows)
    if not found.size:
        return None, None
    row = int(found[int(np.argmax(measure[found]))])
    return decision.ids[row], float(measure[row])


def _excluding(
    required: Mapping[str, str], tag_mask: TagMask, among: NDArray[np.bool_] | None
) -> dict[str, str]:
    """The required tags that no agent of `among` (None: any agent) has; all of them
    when each is held by someone but no agent holds them together."""
    missing = {}
    for key, value in required.items():
        has = tag_mask({key: value})
        if among is not None:
            has = has & among
        if not has.any():
            missing[key] = value
    return missing or dict(required)


__all__ = ["miss_of"]
