"""`mesh topology export|declare`: the AMQP topology as RabbitMQ definitions, or declared."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from mesh.config import Settings
from mesh.connection import connect
from mesh.topology import Topology
from schemas.codec import dumps

DEFAULT_PATH = Path("infra/definitions.json")


def register(sub: Any) -> None:
    p = sub.add_parser("topology", help="export or declare the AMQP topology")
    tsub = p.add_subparsers(dest="action", required=True)
    e = tsub.add_parser("export", help="write RabbitMQ definitions (import_definitions format)")
    e.add_argument("--out", type=Path, default=DEFAULT_PATH)
    e.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    e.set_defaults(func=_export)
    d = tsub.add_parser("declare", help="declare every exchange and queue on the broker")
    d.set_defaults(func=_declare)


def render(settings: Settings) -> bytes:
    """The committed definitions file: the default namespace's static topology."""
    import orjson

    topology = Topology.from_settings(settings)
    return orjson.dumps(topology.definitions(), option=orjson.OPT_INDENT_2) + b"\n"


def _export(args: argparse.Namespace, settings: Settings) -> int:
    data = render(settings)
    if args.check:
        current = args.out.read_bytes() if args.out.exists() else b""
        if current != data:
            print(f"{args.out} is out of date: run `mesh topology export`", file=sys.stderr)
            return 1
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(data)
    print(f"wrote {args.out}")
    return 0


def _declare(args: argparse.Namespace, settings: Settings) -> int:
    async def go() -> None:
        async with await connect(settings, name="mesh-topology") as conn:
            channel = await conn.channel()
            await conn.topology.declare(channel)
            await channel.close()

    asyncio.run(go())
    print(dumps({"declared": settings.namespace}).decode())
    return 0
