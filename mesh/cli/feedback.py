"""`mesh feedback TASK_ID good|bad`: teach the router from a routed task's outcome.

Without access control the memory is written from here (`give_feedback`); under access
control (``MESH_ACCESS_CONTROL=true``: no Redis access) the verdict is published to the
routers (`send_feedback`), which apply it only if this user submitted the task.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pydantic import ValidationError

from mesh.cli._broker import require_namespace
from mesh.config import Settings
from mesh.connection import connect
from mesh.errors import ConfigError, UnknownTask
from mesh.messaging import Publisher
from mesh.router.feedback import give_feedback, send_feedback


def register(sub: Any) -> None:
    p = sub.add_parser("feedback", help="tell the router whether a routed task went well")
    p.add_argument("task_id", help="the task_id of a routed task (from its Result)")
    p.add_argument(
        "verdict", choices=("good", "bad"), help="good: learn from it; bad: count against it"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    good = args.verdict == "good"

    async def go() -> int:
        async with await connect(settings, name="mesh-feedback") as conn:
            await require_namespace(conn, create=False, can_create=False)
            publisher = Publisher(conn)
            await publisher.start()
            try:
                if settings.access_control:
                    await send_feedback(publisher, args.task_id, good)
                    print(
                        f"feedback {args.verdict} on task {args.task_id} sent to the routers "
                        "(applied only if this user submitted the task)"
                    )
                    return 0
                agent_id, counted = await give_feedback(conn, publisher, args.task_id, good)
            except (UnknownTask, ConfigError) as exc:
                print(f"mesh: {exc}", file=sys.stderr)
                return 1
            except ValidationError:
                print(f"mesh: {args.task_id!r} is not a task_id", file=sys.stderr)
                return 1
            finally:
                await publisher.close()
        note = "" if counted else " (already recorded before; not counted again)"
        print(f"feedback {args.verdict} on task {args.task_id} for agent {agent_id}{note}")
        return 0

    return asyncio.run(go())
