"""`mesh dlq list REASON` and `mesh dlq replay REASON`: the dead-letter queues."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from mesh.cli._args import int_range
from mesh.cli._broker import require_namespace, topology_of
from mesh.config import Settings
from mesh.connection import connect
from mesh.dispatch.dead_letters import peek, replay
from mesh.schemas.codec import dumps
from mesh.topology import DEAD_REASONS


def register(sub: Any) -> None:
    p = sub.add_parser("dlq", help="list or replay dead letters")
    dsub = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="list or replay")
    ls = dsub.add_parser("list", help="show dead letters (they stay in their queue)")
    ls.add_argument("reason", choices=DEAD_REASONS, help="which dead-letter queue")
    ls.add_argument(
        "--limit", type=int_range(1), default=20, help="letters to show at most (default 20)"
    )
    ls.add_argument("--json", action="store_true", help="one JSON object per line")
    ls.set_defaults(func=_list)
    rp = dsub.add_parser("replay", help="resubmit dead tasks as new tasks (same trace)")
    rp.add_argument(
        "reason",
        choices=[r for r in DEAD_REASONS if r != "invalid"],
        help="which dead-letter queue (invalid bodies are never replayed)",
    )
    rp.add_argument(
        "--limit", type=int_range(1), default=1, help="tasks to replay at most (default 1)"
    )
    rp.set_defaults(func=_replay)


def _list(args: argparse.Namespace, settings: Settings) -> int:
    async def go() -> int:
        async with await connect(settings, name="mesh-dlq") as conn:
            await require_namespace(conn, create=False, can_create=False)
            letters = await peek(conn, args.reason, args.limit)
        for letter in letters:
            if args.json:
                print(dumps(letter.as_dict()).decode())
            else:
                code = letter.details.get("code") or letter.details.get("last_error") or ""
                print(f"{letter.task_id or '-':34s} {letter.reason:10s} {code}")
        if not letters:
            print(f"{topology_of(settings).dead_queue(args.reason)} is empty", file=sys.stderr)
        return 0

    return asyncio.run(go())


def _replay(args: argparse.Namespace, settings: Settings) -> int:
    async def go() -> int:
        async with await connect(settings, name="mesh-dlq") as conn:
            await require_namespace(conn, create=False, can_create=False)
            replayed = await replay(conn, args.reason, args.limit)
        for old, new in replayed.done:
            print(f"replayed {old} as {new}")
        if replayed.skipped:
            dead = topology_of(settings).dead_queue("invalid")
            print(f"skipped {replayed.skipped} that were not envelopes (moved to {dead})")
        if not replayed.done and not replayed.skipped:
            queue = topology_of(settings).dead_queue(args.reason)
            print(f"nothing replayed from {queue}", file=sys.stderr)
        return 0

    return asyncio.run(go())
