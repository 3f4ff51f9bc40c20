"""A semantic mesh in one process for the routing tests: registry, selector, router, workers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from mesh.access.roles import Role
from mesh.connection import MeshConnection
from mesh.router.embedding import Embedder
from mesh.router.selector import SemanticSelector
from mesh.router.service import RouterService
from mesh.schemas import Event, TaskEnvelope
from mesh.services import Stop, build_selector, start_registry, start_worker
from mesh.topology import event_type_bindings
from mesh.wire import events_of
from mesh.worker.agent import Agent
from tests import access_mode
from tests.access_mode import tap_queue_name
from tests.conftest import ROUTABLE_S


@dataclass
class SemanticMesh:
    conn: MeshConnection
    embedder: Embedder
    selector: SemanticSelector | None = None
    router: RouterService | None = None
    stops: list[Stop] = field(default_factory=list)
    _stop_router: list[Stop] = field(default_factory=list)

    async def start(self, *agents: Agent) -> SemanticMesh:
        self.stops.append(await start_registry(await self._as(Role("registry"), self.stops)))
        await self.start_router()
        for agent in agents:
            await self.add_worker(agent)
        return self

    async def _as(self, role: Role, stops: list[Stop]) -> MeshConnection:
        """The connection a component of `role` runs on: the test's own, or in the
        access-control mode (`tests.access_mode`) one of the role's user, closed after it."""
        mode = access_mode.of(self.conn)
        if mode is None:
            return self.conn
        await mode.declare(self.conn, role.name if role.kind == "worker" else None)
        conn = await mode.open(role, role.label, self.conn.settings)
        stops.append(conn.close)
        return conn

    async def connection_of(self, role: Role) -> MeshConnection:
        """The connection a component of `role` the test runs itself should use (a worker
        it starts and stops, `mesh human` as the router): the test's own without access
        control, else one of the role's user, closed with the mesh."""
        return await self._as(role, self.stops)

    async def start_router(self) -> SemanticSelector:
        stops: list[Stop] = []
        conn = await self._as(Role("router"), stops)
        selector, stop_selector = await build_selector(conn, self.embedder)
        router = RouterService(conn, selector)
        await router.start()
        self.selector, self.router = selector, router
        self._stop_router = [*stops, stop_selector, router.close]
        return selector

    async def stop_router(self) -> None:
        for stop in reversed(self._stop_router):
            await stop()
        self._stop_router = []

    async def add_worker(self, agent: Agent) -> None:
        conn = await self._as(Role("worker", agent.agent_id), self.stops)
        self.stops.append(await start_worker(conn, agent, grace_s=2))
        assert self.selector is not None
        await self.selector.wait_routable([agent.agent_id], timeout=ROUTABLE_S)

    async def close(self) -> None:
        await self.stop_router()
        for stop in reversed(self.stops):
            await stop()


def agent(
    agent_id: str,
    text: str,
    examples: list[str] | None = None,
    reply: Callable[[TaskEnvelope], Any] | None = None,
    **kw: Any,
) -> Agent:
    """An agent whose handler answers ``{"by": agent_id}`` (or `reply(task)`)."""
    a = Agent(agent_id, text, examples=examples or [], **kw)

    @a.handler
    async def handle(task: TaskEnvelope, ctx: Any) -> dict[str, Any]:
        if reply is not None:
            out = reply(task)
            if asyncio.iscoroutine(out):
                out = await out
            return dict(out)
        return {"by": agent_id}

    return a


class EventTap:
    """Collects events of some routing keys from `mesh.events`."""

    def __init__(self, conn: MeshConnection, *patterns: str) -> None:
        self.conn = conn
        self.patterns = patterns
        self.events: list[Event] = []
        self._queue: AbstractQueue | None = None

    async def start(self) -> EventTap:
        channel = await self.conn.channel(confirms=False)
        self._queue = await channel.declare_queue(tap_queue_name(self.conn), exclusive=True)
        for p in self.patterns:  # by event type: tagged outcomes, redacted decisions too
            for key in event_type_bindings(p):
                await self._queue.bind(self.conn.topology.events, routing_key=key)
        await self._queue.consume(self._on, no_ack=True)
        return self

    async def _on(self, message: AbstractIncomingMessage) -> None:
        self.events.extend(events_of(message))  # one event, or a batch

    def of(self, type_: str, task_id: str | None = None) -> list[Event]:
        return [
            e for e in self.events if e.type == type_ and (task_id is None or e.task_id == task_id)
        ]
