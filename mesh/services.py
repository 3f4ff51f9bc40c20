"""Assembling the long-lived components of a process (used by the CLI, the demo and tests).

Each ``start_*`` returns the coroutine function that stops what it started, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.registry.service import RegistryService
from mesh.registry.session import RegistrySession
from mesh.registry.snapshot import AgentSnapshot
from mesh.router.embedding import Embedder, build_embedder
from mesh.router.selector import SemanticSelector
from mesh.router.service import RouterService
from mesh.worker.agent import Agent
from mesh.worker.runtime import WorkerRuntime
from schemas import new_id

Stop = Callable[[], Awaitable[None]]


async def start_embedder(settings: Settings) -> Embedder:
    """The configured embedder, loaded (off the event loop: it may convert the model once)."""
    embedder = build_embedder(settings)
    await asyncio.to_thread(embedder.start)
    return embedder


async def build_selector(
    conn: MeshConnection, embedder: Embedder | None = None
) -> tuple[SemanticSelector, Stop]:
    """A started semantic selector over a live agent snapshot (also used by `mesh explain`)."""
    embedder = embedder or await start_embedder(conn.settings)
    snapshot = AgentSnapshot(conn)
    await snapshot.start()
    selector = SemanticSelector(conn, embedder, snapshot)
    await selector.start()

    async def stop() -> None:
        await selector.close()
        await snapshot.close()

    return selector, stop


async def start_router(
    conn: MeshConnection, *, embedder: Embedder | None = None, semantic: bool = True
) -> Stop:
    """Run a router; with `semantic` (the default) it chooses agents for untargeted tasks."""
    if not semantic:
        router = RouterService(conn)
        await router.start()
        return router.close
    _selector, stop = await start_semantic_router(conn, embedder)
    return stop


async def start_semantic_router(
    conn: MeshConnection, embedder: Embedder | None = None
) -> tuple[SemanticSelector, Stop]:
    """A router with its semantic selector; stops the router first, then the selector."""
    selector, stop_selector = await build_selector(conn, embedder)
    router = RouterService(conn, selector)
    await router.start()

    async def stop() -> None:
        await router.close()
        await stop_selector()

    return selector, stop


async def start_mesh(
    conn: MeshConnection,
    agents: Sequence[Agent],
    *,
    embedder: Embedder | None = None,
    wait_agents: Sequence[str] = (),
    wait_s: float = 30.0,
) -> Stop:
    """Registry, router and one worker per agent in this process (the demo, tests).

    Returns once the router sees every agent of `wait_agents` live.
    """
    stops: list[Stop] = [await start_registry(conn)]
    try:
        selector, stop_router = await start_semantic_router(conn, embedder)
        stops.append(stop_router)
        for agent in agents:
            stops.append(await start_worker(conn, agent))
        await selector.wait_routable(wait_agents, wait_s)
    except BaseException:
        for stop in reversed(stops):
            await stop()
        raise

    async def stop_all() -> None:
        for stop in reversed(stops):
            await stop()

    return stop_all


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
