"""`mesh router`, `mesh worker MODULE:AGENT`: the long-lived processes of the mesh."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from mesh.cli._runner import load_object, serve
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.errors import ConfigError
from mesh.worker.agent import Agent


def register(sub: Any) -> None:
    p = sub.add_parser("router", help="run a router (competing consumer of the ingress queue)")
    p.set_defaults(func=_router)
    p = sub.add_parser("worker", help="run an agent as a queue worker: mesh worker MODULE:AGENT")
    p.add_argument("agent", help="MODULE:ATTRIBUTE naming a mesh.Agent, e.g. agents.support:refund")
    p.add_argument("--instance-id", default=None, help="default: <agent_id>-<random>")
    p.add_argument("--grace-s", type=float, default=30.0, help="drain time on shutdown")
    p.set_defaults(func=_worker)


def _router(args: argparse.Namespace, settings: Settings) -> int:
    from mesh.services import start_router

    async def starter(conn: MeshConnection) -> Callable[[], Awaitable[None]]:
        return await start_router(conn)

    return asyncio.run(serve(settings, "mesh-router", starter))


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    agent = load_object(args.agent)
    if not isinstance(agent, Agent):
        raise ConfigError(f"{args.agent} is a {type(agent).__name__}, not a mesh.Agent")
    from mesh.services import start_worker

    async def starter(conn: MeshConnection) -> Callable[[], Awaitable[None]]:
        return await start_worker(conn, agent, instance_id=args.instance_id, grace_s=args.grace_s)

    return asyncio.run(serve(settings, f"mesh-worker-{agent.agent_id}", starter))
