"""`mesh request TEXT`: send one task and print its Result.

With no router consuming the router queue it fails within a second (`mesh.NoRouter`, the
library's check; ``MESH_LOCAL_RULES`` sends a matching task straight to its agent instead);
while it waits it prints a progress line every few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from pydantic import ValidationError

from mesh.cli._args import UsageError, add_create_flag, int_range, positive_float
from mesh.cli._broker import require_namespace
from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import connect
from mesh.errors import NoRouter, RequestTimeout
from mesh.schemas import TaskEnvelope
from mesh.schemas.codec import dumps, loads

#: seconds between the "waiting for task_id=..." lines
PROGRESS_EVERY_S = 5.0

#: the flag that sets each envelope field (for errors that name the flag)
FLAGS = {
    "capability": "CAPABILITY",
    "payload": "--payload",
    "target": "--target",
    "priority": "--priority",
    "timeout_ms": "--timeout-ms",
    "required_tags": "--tag",
    "task_id": "--task-id",
}


def register(sub: Any) -> None:
    p = sub.add_parser("request", help="send a task and print its Result as JSON")
    p.add_argument("capability", help="what is needed, in natural language")
    p.add_argument("--payload", default="{}", help="the task's input: a JSON object")
    p.add_argument("--target", default=None, help="agent_id: skip semantic routing")
    p.add_argument(
        "--priority", type=int_range(1, 10), default=5, help="1 (lowest) .. 10; default 5"
    )
    p.add_argument(
        "--timeout-ms",
        type=int_range(100, 3_600_000),
        default=30_000,
        help="the task's deadline in ms (100..3600000); default 30000",
    )
    p.add_argument(
        "--tag", action="append", default=[], metavar="K=V", help="required agent tag (repeat)"
    )
    p.add_argument("--task-id", default=None, help="the task's id (default: a new one)")
    p.add_argument(
        "--wait-s",
        type=positive_float,
        default=None,
        help="how long to wait for the Result (default: the timeout plus 5 s)",
    )
    p.add_argument(
        "--progress-s",
        type=positive_float,
        default=PROGRESS_EVERY_S,
        help=f"seconds between progress lines on stderr (default {PROGRESS_EVERY_S:g})",
    )
    add_create_flag(p)
    p.set_defaults(func=_run)


def parse_tags(items: list[str]) -> dict[str, str]:
    """``K=V`` items as a dict; a malformed one is a usage error naming ``--tag``."""
    tags = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--tag {item!r} is not K=V")
        tags[key] = value
    return tags


def flag_errors(exc: ValidationError) -> str:
    """The envelope's validation errors, each naming the flag that set the field."""
    problems = []
    for err in exc.errors():
        field = str(err["loc"][0]) if err["loc"] else ""
        flag = FLAGS.get(field, field or "request")
        problems.append(f"{flag}: {err['msg'][0].lower()}{err['msg'][1:]}")
    return "; ".join(problems)


def build_envelope(args: argparse.Namespace) -> TaskEnvelope:
    """The envelope the command line describes; any bad value is a `UsageError`."""
    try:
        payload = loads(args.payload)
    except ValueError as exc:
        raise UsageError(f"--payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise UsageError("--payload must be a JSON object")
    fields: dict[str, Any] = {
        "capability": args.capability,
        "payload": payload,
        "target": args.target,
        "priority": args.priority,
        "timeout_ms": args.timeout_ms,
        "required_tags": parse_tags(args.tag),
    }
    if args.task_id:
        fields["task_id"] = args.task_id
    try:
        return TaskEnvelope(**fields)
    except ValidationError as exc:
        raise UsageError(flag_errors(exc)) from None


def _run(args: argparse.Namespace, settings: Settings) -> int:
    envelope = build_envelope(args)

    async def go() -> int:
        async with await connect(settings, name="mesh-request") as conn:
            await require_namespace(conn, create=args.create)
            async with MeshClient(conn) as client:
                waiting = asyncio.create_task(client.send(envelope, wait_s=args.wait_s))
                started = time.monotonic()
                while True:
                    done, _ = await asyncio.wait({waiting}, timeout=args.progress_s)
                    if done:
                        break
                    print(
                        f"mesh: waiting for task_id={envelope.task_id} "
                        f"({time.monotonic() - started:.0f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
                try:
                    result = waiting.result()
                except (NoRouter, RequestTimeout) as exc:
                    print(f"mesh: {exc}", file=sys.stderr)
                    return 1
        print(dumps(result.model_dump(mode="json")).decode())
        return 0 if result.status == "completed" else 1

    return asyncio.run(go())
