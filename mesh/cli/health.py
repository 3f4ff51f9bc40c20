"""`mesh health ROLE [AGENT]`: one yes-or-no for an orchestrator's probe.

Exit 0 and one line when the role is served, 1 and one sentence saying what is wrong:

- ``router`` / ``registry``: the broker and Redis answer, the namespace's topology is on
  the broker and the role's queue has at least one consumer;
- ``worker AGENT [--instance ID]``: the agent's queue(s) have a consumer and the registry
  holds a live lease for it (that instance, with ``--instance``) whose tasks are not stuck
  (``stuck`` in its heartbeats: handlers ended long ago, deliveries still unsettled).

Everything is asked of the broker by passive declares (as `mesh request` looks for a
router): the answer is of now, where the management API's consumer counts lag its stats
interval by seconds. No management plugin and no configure permission are needed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from aio_pika.abc import AbstractChannel
from aio_pika.exceptions import ChannelNotFoundEntity

from mesh.cli._args import UsageError
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.errors import Unhealthy
from mesh.registry.state import load_state
from mesh.router_watch import passive_queue
from mesh.schemas import now_ms
from mesh.topology import Topology


def register(sub: Any) -> None:
    p = sub.add_parser(
        "health",
        help="exit 0 when a router, registry or worker is connected and consuming, else 1",
        description="A probe for orchestrators. Examples: mesh health router; "
        "mesh health worker support.refunds --instance support.refunds-1",
    )
    p.add_argument("role", choices=("router", "registry", "worker"), help="what to check")
    p.add_argument("agent", nargs="?", help="the agent id (worker only)")
    p.add_argument("--instance", help="one instance of the agent (worker only)")
    p.set_defaults(func=_health)


def add_check_flag(parser: argparse.ArgumentParser, role: str) -> None:
    """The ``--check`` of a service command: `mesh health` for its role, then exit."""
    parser.add_argument(
        "--check",
        action="store_true",
        help=f"do not run: exit 0 when a {role} is connected and consuming here, else 1 "
        f"(as mesh health {role})",
    )


def _health(args: argparse.Namespace, settings: Settings) -> int:
    if args.role == "worker" and not args.agent:
        raise UsageError("mesh health worker needs the agent id: mesh health worker AGENT")
    return probe(settings, args.role, [args.agent] if args.agent else [], args.instance)


def probe(settings: Settings, role: str, agents: list[str], instance: str | None = None) -> int:
    """Print whether `role` is served (each of `agents` for a worker); the exit code."""

    async def go() -> list[str]:
        async with await connect(settings, name="mesh-health") as conn:
            if role != "worker":
                return [await check(conn, role, None, None)]
            return [await check(conn, role, agent, instance) for agent in agents]

    try:
        for line in asyncio.run(go()):
            print(f"healthy: {line}")
    except Unhealthy as exc:
        print(f"unhealthy: {exc}", file=sys.stderr)
        return 1
    return 0


async def check(conn: MeshConnection, role: str, agent: str | None, instance: str | None) -> str:
    """A sentence saying the role is served; raises `Unhealthy` saying why not."""
    topology = conn.topology
    channel = await conn.channel(confirms=False)
    try:
        await _topology_present(channel, topology)
        if role in ("router", "registry"):
            name = topology.router_queue if role == "router" else topology.registry
            consumers = await _consumers(channel, name)
            if not consumers:
                raise Unhealthy(f"no {role} consumes {name}")
            return f"{consumers} consumer(s) on {name}"
        assert agent is not None
        queues = [name for name, _ in topology.agent_queues(agent)]
        counts = [await _consumers(channel, name) for name in queues]
    finally:
        if not channel.is_closed:
            await channel.close()
    if not any(counts):
        raise Unhealthy(f"no worker consumes {', '.join(queues)}")
    state = await load_state(conn.redis, conn.keys, prune=False)
    now = now_ms()
    live = state[agent].live_instances(now) if agent in state else []
    if instance is not None:
        live = [i for i in live if i.instance_id == instance]
    if not live:
        which = f"instance {instance!r}" if instance else f"agent {agent!r}"
        raise Unhealthy(f"the registry holds no live lease for {which}")
    stuck = [i.instance_id for i in live if i.stuck]
    if stuck and (instance is not None or len(stuck) == len(live)):
        raise Unhealthy(f"tasks stuck (handler ended, delivery unsettled) on {', '.join(stuck)}")
    return f"{len(live)} live instance(s) of {agent}, {max(counts)} consumer(s)"


async def _topology_present(channel: AbstractChannel, topology: Topology) -> None:
    """Every exchange and queue of the namespace is on the broker (passive declares)."""
    spec = topology.static_spec()
    try:
        for ex in spec.exchanges:
            await channel.declare_exchange(ex.name, passive=True)
    except ChannelNotFoundEntity:
        raise Unhealthy(
            f"exchange {ex.name} is not on the broker: namespace {topology.namespace!r} has "
            f"no topology (`{topology.apply_hint(spec)}` creates it)"
        ) from None
    for q in spec.queues:
        await _consumers(channel, q.name)


async def _consumers(channel: AbstractChannel, queue: str) -> int:
    try:
        found = await passive_queue(channel, queue)
    except ChannelNotFoundEntity:
        raise Unhealthy(f"queue {queue} is not on the broker") from None
    return int(found.declaration_result.consumer_count or 0)


__all__ = ["check"]
