"""`mesh explain TEXT [--tag k=v]`: the ranked table a router would compute for TEXT, and why.

Uses the live agents (from the registry's state in Redis), their learned memories and the
same selector and scoring code as the routers; it dispatches nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from mesh.cli._args import add_create_flag, int_range, require_router_stack
from mesh.cli._broker import require_namespace
from mesh.cli.request import parse_tags
from mesh.config import Settings
from mesh.connection import connect
from mesh.router.scoring import Candidate, Decision
from mesh.schemas.codec import dumps

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
        finally:
            await stop()
    rows = decision.candidates(args.limit)
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
                    "candidates": [c.as_dict() for c in rows],
                }
            ).decode()
        )
        return 0
    if not rows:
        print("no agents are registered and live")
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
    return 0


def reason(decision: Decision, rows: list[Candidate]) -> str:
    """One sentence: why the winner won (or why nobody did)."""
    if decision.agent_id is None:
        eligible = [c for c in rows if c.filtered is None]
        if not rows:
            return "no live agents"
        if not eligible:
            best = max(rows, key=lambda c: c.similarity)
            return (
                f"nobody clears the threshold (best similarity {best.similarity:.3f}, "
                f"{best.agent_id}): the router calls for bids, then the fallback agent"
            )
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
