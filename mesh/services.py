"""Assembling the long-lived components of a process (used by the CLI, the demo and tests).

Each ``start_*`` returns the coroutine function that stops what it started, in order.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from mesh.connection import MeshConnection
from mesh.router.service import RouterService
from mesh.worker.agent import Agent
from mesh.worker.runtime import WorkerRuntime

Stop = Callable[[], Awaitable[None]]


async def start_router(conn: MeshConnection) -> Stop:
    router = RouterService(conn)
    await router.start()
    return router.close


async def start_worker(
    conn: MeshConnection, agent: Agent, *, instance_id: str | None = None, grace_s: float = 30.0
) -> Stop:
    runtime = WorkerRuntime(agent, conn, instance_id=instance_id)
    await runtime.start()

    async def stop() -> None:
        await runtime.drain(grace_s)

    return stop
