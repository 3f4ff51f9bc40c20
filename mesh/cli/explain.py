"""`mesh explain TEXT [--tag k=v]`: the ranked table a router would compute for TEXT, and why.

Uses the live agents (from the registry's state in Redis), their learned memories and the
same selector and scoring code as the routers; it dispatches nothing. When nobody wins, it
says what a router would do with the current settings: the call for bids (agents that
answer bids), then the fallback agent if one is configured and live, else the human queue
(``MESH_HUMAN_QUEUE``), else unroutable with its code and sentence.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
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
    from mesh.router.scoring import Candidate, Decision

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
            decision = await selector.decide(args.text, tags, list(args.exclude))
            miss = (
                selector.miss(decision, tags, list(args.exclude))
                if decision.agent_id is None
                else None
            )
            bidders = [
                a for a in decision.bid_candidates(settings.bid_top_k) if selector.answers_bids(a)
            ]
        finally:
            await stop()
    rows = decision.candidates(args.limit)
    then = outcome(args.text, tags, list(args.exclude), miss, bidders, settings)
    if args.json:
        print(
            dumps(
                {
                    "text": args.text,
                    "threshold": decision.threshold,
                    "chosen": decision.agent_id,
                    "strategy": decision.strategy,
                    "runner_up": decision.runner_up,
                    "reason": reason(decision, rows),
                    "then": then,
                    "candidates": [c.as_dict() for c in rows],
                }
            ).decode()
        )
        return 0
    if not rows:
        print(f"no agents are registered and live: {then}")
        return 1
    print(f"{COLUMNS[0]:32s} " + " ".join(f"{c:>10s}" for c in COLUMNS[1:]))
    for c in rows:
        d = c.as_dict()
        cells = " ".join(
            f"{d[k]:>10.3f}" if isinstance(d[k], float) else f"{d[k] or '':>10s}"
            for k in COLUMNS[1:]
        )
        mark = "*" if c.agent_id == decision.agent_id else " "
        print(f"{mark}{c.agent_id[:31]:31s} {cells}")
    print(f"\nthreshold {decision.threshold:.3f}: {reason(decision, rows)}")
    if then:
        print(f"then: {then}")
    return 0


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
        "explore": "cold-start exploration",
    }.get(decision.strategy, decision.strategy)
    detail = f" (total {win.total:.3f}, similarity {win.similarity:.3f})" if win else ""
    runner = f"; runner-up {decision.runner_up}" if decision.runner_up else ""
    return f"{decision.agent_id} wins by {what}{detail}{runner}"
