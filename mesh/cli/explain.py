"""`mesh explain TEXT [--tag k=v]`: the ranked table a router would compute for TEXT, and why.

Uses the live agents (from the registry's state in Redis), their learned memories and the
same selector and scoring code as the routers; it dispatches nothing. When nobody wins, it
says what a router would do with the current settings: the call for bids (agents that
answer bids), then the fallback agent if one is configured and live, else the human queue
(``MESH_HUMAN_QUEUE``), else unroutable with its code and sentence.

A text carrying several intents (``MESH_MULTI_INTENT``, `mesh.router.compound`) is split
as a router splits it: the report lists its clauses, each with its best agent and
confidence, and the child tasks it would be dispatched as; a single intent shows the
table alone.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mesh.cli._args import add_create_flag, int_range, require_router_stack
from mesh.cli._broker import require_namespace, topology_of
from mesh.cli.request import parse_tags
from mesh.config import Settings
from mesh.connection import connect
from mesh.router.reasons import NoMatch, unmatched
from mesh.schemas import TaskEnvelope
from mesh.schemas.codec import dumps

if TYPE_CHECKING:  # numpy, of the `router` extra: `mesh worker` loads none of it
    from mesh.router.compound import Scored
    from mesh.router.intents import Split
    from mesh.router.scoring import Candidate, Decision
    from mesh.router.selector import SemanticSelector

COLUMNS = (
    "agent_id",
    "similarity",
    "semantic",
    "keyword",
    "load",
    "idle",
    "history",
    "priority",
    "total",
    "filtered",
)


def register(sub: Any) -> None:
    p = sub.add_parser("explain", help="rank the live agents for a text, with the score parts")
    p.add_argument("text", help="the capability text of a task")
    p.add_argument("--tag", action="append", default=[], metavar="K=V", help="required tag")
    p.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="AGENT_ID",
        help="leave this agent out, as a reroute would (repeat)",
    )
    p.add_argument("--limit", type=int_range(1), default=15, help="rows to show (default 15)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_create_flag(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    require_router_stack()
    return asyncio.run(_explain(args, settings))


async def _explain(args: argparse.Namespace, settings: Settings) -> int:
    from mesh.services import build_selector

    tags = parse_tags(args.tag)
    async with await connect(settings, name="mesh-explain") as conn:
        await require_namespace(conn, create=args.create)
        print("explain: loading the model and the live agents...", file=sys.stderr, flush=True)
        selector, stop = await build_selector(conn)
        try:
            found = await examine(selector, args.text, tags, list(args.exclude), settings)
        finally:
            await stop()
    if args.json:
        print(dumps(found.as_json(args.limit)).decode())
        return 0
    lines = found.lines(args.limit)
    print("\n".join(lines))
    return 0 if found.decision.ids else 1


@dataclass(frozen=True)
class Explained:
    """What `mesh explain` found for a text: the whole text's decision, what a router does
    when nobody wins, and the multi-intent split when the text carries several intents."""

    text: str
    decision: Decision
    then: str
    #: the clauses' decisions (None: one clause, or ``MESH_MULTI_INTENT=off``)
    scored: Scored | None = None
    #: the compound request's parts (None: it is routed as one task)
    split: Split | None = None
    floor: float = 0.0

    def clauses(self) -> list[dict[str, Any]]:
        """Each clause with its best agent and confidence, and whether it is an intent."""
        from mesh.router.intents import best_fit

        if self.scored is None:
            return []
        out = []
        for clause, decision in zip(self.scored.clauses, self.scored.decisions, strict=True):
            agent_id, confidence = best_fit(decision)
            out.append(
                {
                    "text": clause.text,
                    "agent_id": agent_id,
                    "confidence": round(confidence, 4),
                    "intent": agent_id is not None and confidence >= self.floor,
                }
            )
        return out

    def as_json(self, limit: int) -> dict[str, Any]:
        decision = self.decision
        rows = decision.candidates(limit)
        compound = None
        if self.split is not None:
            compound = {
                **self.split.as_dict(),
                "clauses": self.clauses(),
                "dispatch": "child_tasks",
            }
        return {
            "text": self.text,
            "threshold": decision.threshold,
            "chosen": decision.agent_id,
            "strategy": decision.strategy,
            "runner_up": decision.runner_up,
            "reason": reason(decision, rows),
            "then": self.then,
            "compound": compound,
            "candidates": [c.as_dict() for c in rows],
        }

    def lines(self, limit: int) -> list[str]:
        """The human-readable report."""
        decision = self.decision
        rows = decision.candidates(limit)
        if not rows:
            return [f"no agents are registered and live: {self.then}"]
        out = [f"{COLUMNS[0]:32s} " + " ".join(f"{c:>10s}" for c in COLUMNS[1:])]
        for c in rows:
            d = c.as_dict()
            cells = " ".join(
                f"{d[k]:>10.3f}" if isinstance(d[k], float) else f"{d[k] or '':>10s}"
                for k in COLUMNS[1:]
            )
            mark = "*" if c.agent_id == decision.agent_id else " "
            out.append(f"{mark}{c.agent_id[:31]:31s} {cells}")
        out.append(f"\nthreshold {decision.threshold:.3f}: {reason(decision, rows)}")
        if self.then and self.split is None:
            out.append(f"then: {self.then}")
        if self.split is not None:
            out.extend(self._compound_lines())
        return out

    def _compound_lines(self) -> list[str]:
        assert self.split is not None
        parts = self.split.parts
        out = [
            f"\ncompound request: {len(parts)} intents, dispatched as {len(parts)} child tasks "
            "(one per part, to its agent; the caller gets one merged Result; "
            "MESH_MULTI_INTENT=false: one task, as ranked above)",
            f"clauses (an intent needs confidence >= {self.floor:.3f}):",
        ]
        for number, clause in enumerate(self.clauses(), 1):
            note = "" if clause["intent"] else "  (no intent of its own: joins its neighbour)"
            agent_id = clause["agent_id"] or "-"
            out.append(
                f"  {number}. {agent_id[:31]:31s} {clause['confidence']:>7.3f}  "
                f"{clause['text']!r}{note}"
            )
        out.append("child tasks:")
        for number, part in enumerate(parts, 1):
            out.append(
                f"  p{number}. {part.agent_id[:31]:31s} {part.confidence:>7.3f}  {part.text!r}"
            )
        return out


async def examine(
    selector: SemanticSelector,
    text: str,
    tags: dict[str, str],
    excluded: list[str],
    settings: Settings,
) -> Explained:
    """Rank the live agents for `text` as a router would, and split it as a router would
    (with the selector's own scoring; nothing is dispatched)."""
    from mesh.router.compound import score_clauses
    from mesh.router.intents import find_intents

    decision = await selector.decide(text, tags, excluded)
    miss = selector.miss(decision, tags, excluded) if decision.agent_id is None else None
    bidders = [a for a in decision.bid_candidates(settings.bid_top_k) if selector.answers_bids(a)]
    then = outcome(text, tags, excluded, miss, bidders, settings)
    if not settings.multi_intent:
        return Explained(text, decision, then)
    envelope = TaskEnvelope(capability=text or "?", required_tags=tags, excluded_agents=excluded)
    scored = await score_clauses(selector, envelope)
    if scored is None:
        return Explained(text, decision, then)
    floor = settings.multi_intent_floor
    split = find_intents(text, scored.clauses, scored.decisions, scored.whole, floor=floor)
    if split is None:
        return Explained(text, decision, then)
    return Explained(text, decision, then, scored, split, floor)


def outcome(
    text: str,
    tags: dict[str, str],
    excluded: list[str],
    miss: NoMatch | None,
    bidders: list[str],
    settings: Settings,
) -> str:
    """What a router does with the task when nobody wins, with the current settings ('' when
    somebody wins): bids, then the fallback agent, the human queue, or unroutable."""
    if miss is None:
        return ""
    bids = (
        f"the router calls for bids from {', '.join(bidders)}; if none wins, "
        if bidders and miss.cause == "below_threshold"
        else ""
    )
    if miss.cause == "below_threshold" and miss.fallback and miss.fallback_why == "could take it":
        return f"{bids}the fallback agent {miss.fallback} takes it (MESH_FALLBACK_AGENT)"
    envelope = TaskEnvelope(capability=text or "?", required_tags=tags, excluded_agents=excluded)
    human = topology_of(settings).human if settings.human_queue else None
    ending = unmatched(envelope, miss, human_queue=human)
    if ending.status == "queued_for_human":
        return (
            f"{bids}it waits for a person in {human} (`mesh human list`), and the caller gets "
            "a queued_for_human Result (MESH_HUMAN_QUEUE=false: unroutable instead)"
        )
    return f"{bids}{ending.status} [{ending.code}]: {ending.message}"


def reason(decision: Decision, rows: list[Candidate]) -> str:
    """One sentence: why the winner won (or why nobody did)."""
    if decision.agent_id is None:
        eligible = [c for c in rows if c.filtered is None]
        if not rows:
            return "no live agents"
        if not eligible:
            best = max(rows, key=lambda c: c.similarity)
            return f"nobody is eligible (best similarity {best.similarity:.3f}, {best.agent_id})"
        return "no eligible agent"
    win = next((c for c in rows if c.agent_id == decision.agent_id), None)
    what = {
        "best": "highest total",
        "arbitrated": "near tie arbitrated by similarity, then load, then success rate",
        "explore": "the cold-start quota (a new agent close to the best)",
    }.get(decision.strategy, decision.strategy)
    detail = f" (total {win.total:.3f}, similarity {win.similarity:.3f})" if win else ""
    runner = f"; runner-up {decision.runner_up}" if decision.runner_up else ""
    return f"{decision.agent_id} wins by {what}{detail}{runner}"
