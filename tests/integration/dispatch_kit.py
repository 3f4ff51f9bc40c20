"""Shared pieces of the dispatch integration tests: a mesh in one process, queue peeks."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
from aio_pika.abc import AbstractIncomingMessage

from mesh.access.roles import Role
from mesh.connection import MeshConnection
from mesh.router.plan import RouteChoice, Selector
from mesh.router.service import RouterService
from mesh.schemas import Event, RouteInfo, TaskEnvelope
from mesh.wire import events_of
from mesh.worker.agent import Agent
from mesh.worker.membership import Membership
from mesh.worker.runtime import WorkerRuntime
from tests import access_mode
from tests.access_mode import tap_queue_name


class OrderedSelector:
    """Candidates in a fixed order; the first one not excluded wins."""

    def __init__(self, *agent_ids: str) -> None:
        self.agent_ids = agent_ids

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | None:
        for agent_id in self.agent_ids:
            if agent_id not in envelope.excluded_agents:
                return RouteChoice(agent_id, RouteInfo(strategy="semantic", score=1.0))
        return None

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None:
        return None

    def is_live(self, agent_id: str) -> bool:
        return agent_id in self.live

    def awaited(self, agent_id: str) -> bool:
        return agent_id in self.awaiting

    async def admits(self, agent_id: str) -> bool:
        return True

    def contract_errors(self, agent_id: str, payload: dict[str, Any]) -> list[dict[str, str]]:
        return []

    #: agents this selector reports live (a test's stand-in for the registry's snapshot)
    live: frozenset[str] = frozenset()
    #: it learns from no outcome: its dispatches carry no router tag
    outcome_tag: str | None = None
    #: agents it reports restarting (no live instance, a lease ended recently)
    awaiting: frozenset[str] = frozenset()


async def declare_idle_agents(conn: MeshConnection, *agent_ids: str) -> None:
    """The mesh topology plus a queue for each agent that nobody consumes: dispatches to
    them expire after the accept timeout."""
    channel = await conn.channel()
    try:
        await conn.topology.declare(channel)
        for agent_id in agent_ids:
            await conn.topology.declare(channel, conn.topology.agent_spec(agent_id))
    finally:
        await channel.close()


async def start_router(
    conn: MeshConnection, add_cleanup: Any, selector: Selector | None = None
) -> RouterService:
    mode = access_mode.of(conn)
    if mode is not None:  # the router under its own user (tests.access_mode)
        await mode.declare(conn)
        conn = await mode.open(Role("router"), "router", conn.settings)
        add_cleanup(conn.close)
    router = RouterService(conn, selector)
    await router.start()
    add_cleanup(router.close)
    return router


async def start_worker(
    conn: MeshConnection,
    add_cleanup: Any,
    agent: Agent,
    *,
    instance_id: str | None = None,
    membership: Membership | None = None,
) -> WorkerRuntime:
    mode = access_mode.of(conn)
    if mode is not None:  # the agent under its worker user (tests.access_mode)
        await mode.declare(conn, agent.agent_id)
        conn = await mode.open(Role("worker", agent.agent_id), agent.agent_id, conn.settings)
        add_cleanup(conn.close)
    worker = WorkerRuntime(agent, conn, instance_id=instance_id, membership=membership)
    await worker.start()
    add_cleanup(lambda: worker.drain(grace_s=2))
    return worker


async def drain_queue(conn: MeshConnection, name: str) -> list[AbstractIncomingMessage]:
    """Every message now in queue `name` (consumed)."""
    channel = await conn.channel()
    try:
        queue = await channel.get_queue(name, ensure=False)
        found = []
        while (message := await queue.get(no_ack=True, fail=False)) is not None:
            found.append(message)
        return found
    finally:
        await channel.close()


async def wait_for_messages(
    conn: MeshConnection, name: str, count: int = 1, timeout: float = 10.0
) -> list[AbstractIncomingMessage]:
    """Wait until `count` messages sat in queue `name`; returns them (consumed)."""
    found: list[AbstractIncomingMessage] = []
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while len(found) < count:
        found += await drain_queue(conn, name)
        if len(found) >= count:
            break
        if loop.time() > end:
            raise AssertionError(f"{len(found)}/{count} messages in {name} after {timeout}s")
        await asyncio.sleep(0.05)
    return found


class EventTap:
    """Collects events from `mesh.events` (bound to `pattern`) while the test runs."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    @classmethod
    async def open(cls, conn: MeshConnection, add_cleanup: Any, pattern: str = "#") -> EventTap:
        tap = cls()
        channel = await conn.channel(confirms=False)
        add_cleanup(channel.close)
        # named in the namespace: an admin under access control may declare only there
        queue = await channel.declare_queue(tap_queue_name(conn), exclusive=True)
        await queue.bind(conn.topology.events, routing_key=pattern)

        async def on_event(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            tap.events.extend(events_of(message))  # one event, or a batch

        await queue.consume(on_event, no_ack=True)
        return tap

    def of(self, type_: str, task_id: str | None = None) -> list[Event]:
        return [
            e for e in self.events if e.type == type_ and (task_id is None or e.task_id == task_id)
        ]
