"""Assembling the long-lived components of a process (used by the CLI, the demo and tests).

Each ``start_*`` returns the coroutine function that stops what it started, in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mesh.connection import MeshConnection
from mesh.registry.service import RegistryService
from mesh.registry.session import RegistrySession
from mesh.router.service import RouterService
from mesh.worker.agent import Agent
from mesh.worker.runtime import WorkerRuntime
from schemas import new_id

Stop = Callable[[], Awaitable[None]]


async def start_router(conn: MeshConnection) -> Stop:
    router = RouterService(conn)
    await router.start()
    return router.close


async def start_registry(conn: MeshConnection) -> Stop:
    """Run a registry service (any number may run; they share their state in Redis)."""
    registry = RegistryService(conn)
    await registry.start()
    return registry.close


async def start_worker(
    conn: MeshConnection, agent: Agent, *, instance_id: str | None = None, grace_s: float = 30.0
) -> Stop:
    """Run `agent` as a worker holding a registry lease (waits until a registry answers)."""
    instance_id = instance_id or f"{agent.agent_id}-{new_id()[:12]}"
    session = RegistrySession(conn, agent.registration(instance_id))
    runtime = WorkerRuntime(agent, conn, instance_id=instance_id, membership=session)
    await runtime.start()

    async def stop() -> None:
        await runtime.drain(grace_s)

    return stop
