"""`mesh request TEXT`: send one task and print its Result."""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from pydantic import ValidationError

from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import connect
from mesh.errors import ConfigError, RequestTimeout
from schemas.codec import dumps, loads


def register(sub: Any) -> None:
    p = sub.add_parser("request", help="send a task and print its Result as JSON")
    p.add_argument("capability", help="what is needed, in natural language")
    p.add_argument("--payload", default="{}", help="JSON object")
    p.add_argument("--target", default=None, help="agent_id: skip semantic routing")
    p.add_argument("--priority", type=int, default=5)
    p.add_argument("--timeout-ms", type=int, default=30_000)
    p.add_argument("--tag", action="append", default=[], metavar="K=V", help="required tag")
    p.add_argument("--task-id", default=None)
    p.set_defaults(func=_run)


def parse_tags(items: list[str]) -> dict[str, str]:
    tags = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"tag {item!r} is not K=V")
        tags[key] = value
    return tags


def _run(args: argparse.Namespace, settings: Settings) -> int:
    try:
        payload = loads(args.payload)
    except ValueError as exc:
        raise ConfigError(f"--payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise ConfigError("--payload must be a JSON object")
    fields: dict[str, Any] = {
        "target": args.target,
        "priority": args.priority,
        "timeout_ms": args.timeout_ms,
        "required_tags": parse_tags(args.tag),
    }
    if args.task_id:
        fields["task_id"] = args.task_id

    async def go() -> int:
        async with await connect(settings, name="mesh-request") as conn, MeshClient(conn) as client:
            try:
                result = await client.request(args.capability, payload, **fields)
            except ValidationError as exc:
                print(f"mesh: invalid request: {exc}", file=sys.stderr)
                return 2
            except RequestTimeout as exc:
                print(f"mesh: {exc}", file=sys.stderr)
                return 1
        print(dumps(result.model_dump(mode="json")).decode())
        return 0 if result.status == "completed" else 1

    return asyncio.run(go())
