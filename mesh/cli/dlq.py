"""`mesh dlq list|replay|purge REASON`: the dead-letter queues.

Each queue is bounded (``MESH_DEAD_LETTER_MAX_LENGTH`` letters, then the broker refuses
more and the sender reports the drop; ``MESH_DEAD_LETTER_TTL_S``); `mesh dlq purge`
empties one, after a confirmation (``--yes`` without a terminal).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from mesh.cli._args import UsageError, identifier, int_range
from mesh.cli._broker import require_namespace, topology_of
from mesh.config import Settings
from mesh.connection import connect
from mesh.dispatch.dead_letters import peek, purge, replay
from mesh.schemas.codec import dumps
from mesh.topology import DEAD_REASONS


def register(sub: Any) -> None:
    p = sub.add_parser("dlq", help="list, replay or purge dead letters")
    dsub = p.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="list, replay or purge"
    )
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
    rp.add_argument(
        "--target",
        type=identifier,
        default=None,
        metavar="AGENT",
        help="send the new tasks to this agent (default: as they were sent: their own "
        "target, or semantic routing)",
    )
    rp.set_defaults(func=_replay)
    pg = dsub.add_parser("purge", help="delete every dead letter of a queue")
    pg.add_argument("reason", choices=DEAD_REASONS, help="which dead-letter queue")
    pg.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    pg.set_defaults(func=_purge)


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
            replayed = await replay(conn, args.reason, args.limit, target=args.target)
        to = f" for {args.target}" if args.target else ""
        for old, new in replayed.done:
            print(f"replayed {old} as {new}{to}")
        if replayed.skipped:
            dead = topology_of(settings).dead_queue("invalid")
            print(f"skipped {replayed.skipped} that were not envelopes (moved to {dead})")
        if not replayed.done and not replayed.skipped:
            queue = topology_of(settings).dead_queue(args.reason)
            print(f"nothing replayed from {queue}", file=sys.stderr)
        return 0

    return asyncio.run(go())


def _purge(args: argparse.Namespace, settings: Settings) -> int:
    queue = topology_of(settings).dead_queue(args.reason)
    if not args.yes:
        if not sys.stdin.isatty():
            raise UsageError(f"mesh dlq purge deletes every letter of {queue}: pass --yes")
        answer = input(f"delete every dead letter of {queue}? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return 1

    async def go() -> int:
        async with await connect(settings, name="mesh-dlq") as conn:
            await require_namespace(conn, create=False, can_create=False)
            deleted = await purge(conn, args.reason)
        print(f"deleted {deleted} dead letter(s) from {queue}")
        return 0

    return asyncio.run(go())
