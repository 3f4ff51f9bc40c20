"""`mesh topology export|declare`: the AMQP topology as RabbitMQ definitions, or declared."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import Any

from mesh.cli._export import add_out_arguments, write_or_check
from mesh.config import Settings
from mesh.connection import connect
from mesh.schemas.codec import dumps
from mesh.topology import Topology

#: an agent id, as `schemas` accepts it
AGENT_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


def register(sub: Any) -> None:
    p = sub.add_parser("topology", help="export or declare the AMQP topology")
    tsub = p.add_subparsers(
        dest="action", required=True, metavar="ACTION", help="export or declare"
    )
    e = tsub.add_parser(
        "export", help="print (or write) RabbitMQ definitions (import_definitions format)"
    )
    add_out_arguments(e, what="the definitions", example="definitions.json")
    e.set_defaults(func=_export)
    for name in ("apply", "declare"):
        d = tsub.add_parser(
            name,
            help="create every exchange and queue of MESH_NAMESPACE on the broker (the admin "
            "does it once; components with MESH_TOPOLOGY=passive only check it)"
            + ("" if name == "apply" else "; same as apply"),
            description="Create the namespace's exchanges, queues and bindings, and the "
            "queues of each --agent. Idempotent. Example: mesh topology apply "
            "--agent support.refunds --agent support.logistics",
        )
        d.add_argument(
            "--agent",
            action="append",
            default=[],
            metavar="ID",
            help="also create this agent's queue(s); repeatable",
        )
        d.set_defaults(func=_declare)


def render(settings: Settings) -> bytes:
    """The configured namespace's static topology as RabbitMQ definitions."""
    import orjson

    topology = Topology.from_settings(settings)
    return orjson.dumps(topology.definitions(), option=orjson.OPT_INDENT_2) + b"\n"


def _export(args: argparse.Namespace, settings: Settings) -> int:
    return write_or_check(args, settings, render, command="mesh topology export")


def _declare(args: argparse.Namespace, settings: Settings) -> int:
    agents: list[str] = args.agent
    for agent in agents:
        if not AGENT_ID.fullmatch(agent):
            print(f"mesh: --agent {agent!r} is not an agent id", file=sys.stderr)
            return 2

    async def go() -> None:
        async with await connect(settings, name="mesh-topology") as conn:
            channel = await conn.channel()
            topology = conn.topology
            await topology.declare(channel, apply=True)
            for agent in agents:
                await topology.declare(channel, topology.agent_spec(agent), apply=True)
            await channel.close()

    asyncio.run(go())
    print(dumps({"declared": settings.namespace, "agents": agents}).decode())
    return 0
