"""Does a request carry several intents? Pure: reads `Decision`s, no I/O.

`find_intents` takes the clauses of a request (`mesh.router.clauses`), the router's
decision for each clause and its decision for the whole text, all made with the same
scoring (`mesh.router.scoring.score`, the live threshold, no exploration), and says
whether the request is compound:

1. a clause is an *intent* when its best agent's confidence (similarity plus keyword
   part, what the threshold is compared with) reaches `floor`, a threshold for clauses;
   a clause that is none (too short, a greeting) is merged with the part before it (or
   after it, at the start), by span, so no words are lost;
2. adjacent parts of the same agent are one part;
3. the request is compound when two or more parts remain, each of another agent, and
   the whole text does not explain them better: every part scores its agent higher, by
   more than `margin`, than the whole text scores that agent. A single request cut at a
   "plus" ("what is 5 plus 3") leaves a fragment that is no intent; two requests joined
   score better apart, each for its own agent.

`bench/multi_intent.py` measured the margin (README "Multi-intent requests").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from mesh.config import default_of
from mesh.router.clauses import Clause
from mesh.router.scoring import Decision

__all__ = ["DEFAULT_FLOOR", "DEFAULT_MARGIN", "Intent", "Split", "best_fit", "find_intents"]

#: the confidence a clause needs to be an intent of its own (`bench/multi_intent.py`: a
#: clause is a short text and scores lower than a whole request; at the router's cold
#: threshold 0.45 a fifth of CLINC150 compounds lose a part)
DEFAULT_FLOOR: float = default_of("multi_intent_floor")
#: how much better than the whole text each part must score for its agent
DEFAULT_MARGIN = 0.0


@dataclass(frozen=True, slots=True)
class Intent:
    """One part of a compound request: its words (a span of the request) and its agent."""

    text: str
    start: int
    end: int
    agent_id: str
    confidence: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "agent_id": self.agent_id,
            "confidence": round(self.confidence, 4),
        }


@dataclass(frozen=True, slots=True)
class Split:
    """A compound request: its parts in order, and what the whole text scored."""

    parts: tuple[Intent, ...]
    whole_agent: str | None
    whole_confidence: float

    def as_dict(self) -> dict[str, Any]:
        """What the ``route.decision`` event and `mesh explain` show of the split."""
        return {
            "parts": [p.as_dict() for p in self.parts],
            "whole": {"agent_id": self.whole_agent, "confidence": round(self.whole_confidence, 4)},
        }


def best_fit(decision: Decision) -> tuple[str | None, float]:
    """The agent whose confidence is highest, threshold or not (-1 when none is available)."""
    ok = (decision.filter_code == 0) | (decision.filter_code == 3)
    if not ok.any():
        return None, -1.0
    conf = np.where(ok, decision.similarity + decision.keyword, -np.inf)
    row = int(np.argmax(conf))
    return decision.ids[row], float(conf[row])


def find_intents(
    text: str,
    clauses: Sequence[Clause],
    decisions: Sequence[Decision],
    whole: Decision,
    *,
    floor: float = DEFAULT_FLOOR,
    margin: float = DEFAULT_MARGIN,
) -> Split | None:
    """The parts of a compound request, or None when it is one request (module docstring)."""
    if len(clauses) < 2:
        return None
    parts: list[Intent] = []
    pending: Clause | None = None  # clauses before the first intent
    for clause, decision in zip(clauses, decisions, strict=True):
        agent, conf = best_fit(decision)
        if agent is None or conf < floor:
            if parts:
                parts[-1] = _widen(text, parts[-1], clause.end)
            elif pending is None:
                pending = clause
            continue
        start = pending.start if pending is not None else clause.start
        pending = None
        if parts and parts[-1].agent_id == agent:
            last = parts[-1]
            conf = max(conf, last.confidence)
            parts[-1] = Intent(text[last.start : clause.end], last.start, clause.end, agent, conf)
            continue
        parts.append(Intent(text[start : clause.end], start, clause.end, agent, conf))
    if len(parts) < 2 or len({p.agent_id for p in parts}) < len(parts):
        return None
    if any(p.confidence <= _confidence_of(whole, p.agent_id) + margin for p in parts):
        return None  # the whole text explains that part at least as well
    whole_agent, whole_conf = best_fit(whole)
    return Split(tuple(parts), whole_agent, whole_conf)


def _confidence_of(decision: Decision, agent_id: str) -> float:
    row = decision.ids.index(agent_id)
    return float(decision.similarity[row] + decision.keyword[row])


def _widen(text: str, part: Intent, end: int) -> Intent:
    return Intent(text[part.start : end], part.start, end, part.agent_id, part.confidence)
