"""Assembling the long-lived components of a process (used by the CLI, the demo and tests).

Each ``start_*`` returns the coroutine function that stops what it started, in reverse
order: every component is started on a `contextlib.AsyncExitStack` (``start()``, then its
``close()`` pushed), so a failure half-way closes what was already running, and the stop
unwinds the stack.

The router's modules (and numpy, which only the `router` extra installs) are imported by
the functions that start a router: a worker or registry process never loads them
(`tests/integration/test_worker_without_numpy.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.lifecycle import Component, Stopper
from mesh.metrics.core import Metrics
from mesh.registry.service import RegistryService
from mesh.registry.session import RegistrySession
from mesh.registry.snapshot import AgentSnapshot
from mesh.schemas import new_id
from mesh.worker.agent import Agent
from mesh.worker.runtime import WorkerRuntime

if TYPE_CHECKING:
    from mesh.router.embedding import Embedder
    from mesh.router.selector import SemanticSelector

Stop = Callable[[], Awaitable[None]]
C = TypeVar("C", bound=Component)


async def start_embedder(settings: Settings) -> Embedder:
    """The configured embedder, loaded (off the event loop: it may convert the model once)."""
    from mesh.router.embedding import build_embedder
    from mesh.router.threads import limit_blas_threads

    limit_blas_threads(settings.blas_threads)
    embedder = build_embedder(settings)
    await asyncio.to_thread(embedder.start)
    return embedder


async def _started(stack: contextlib.AsyncExitStack, component: C) -> C:
    """Start `component` and push its `close()` onto `stack` (what `Lifecycle` does)."""
    await component.start()
    stack.push_async_callback(component.close)
    return component


async def build_selector(
    conn: MeshConnection, embedder: Embedder | None = None
) -> tuple[SemanticSelector, Stop]:
    """A started semantic selector over a live agent snapshot (also used by `mesh explain`)."""
    from mesh.router.selector import SemanticSelector

    embedder = embedder or await start_embedder(conn.settings)
    async with contextlib.AsyncExitStack() as stack:
        snapshot = await _started(stack, AgentSnapshot(conn))
        selector = await _started(stack, SemanticSelector(conn, embedder, snapshot))
        return selector, stack.pop_all().aclose
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def start_router(
    conn: MeshConnection,
    *,
    embedder: Embedder | None = None,
    semantic: bool = True,
    metrics: Metrics | None = None,
) -> Stop:
    """Run a router; with `semantic` (the default) it chooses agents for untargeted tasks.

    With `metrics`, it records into them (`mesh.metrics`).
    """
    from mesh.router.service import RouterService

    if not semantic:
        async with contextlib.AsyncExitStack() as stack:
            await _started(stack, RouterService(conn, metrics=metrics))
            return stack.pop_all().aclose
    _selector, stop = await start_semantic_router(conn, embedder, metrics=metrics)
    return stop


async def start_semantic_router(
    conn: MeshConnection, embedder: Embedder | None = None, *, metrics: Metrics | None = None
) -> tuple[SemanticSelector, Stop]:
    """A router with its semantic selector; stops the router first, then the selector."""
    from mesh.router.service import RouterService

    async with contextlib.AsyncExitStack() as stack:
        selector, stop_selector = await build_selector(conn, embedder)
        stack.push_async_callback(stop_selector)
        await _started(stack, RouterService(conn, selector, metrics=metrics))
        return selector, stack.pop_all().aclose
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def start_mesh(
    conn: MeshConnection,
    agents: Sequence[Agent],
    *,
    embedder: Embedder | None = None,
    wait_agents: Sequence[str] = (),
    wait_s: float = 30.0,
    metrics: Metrics | None = None,
) -> Stop:
    """Registry, router and one worker per agent in this process (the demo, tests).

    Returns once the router sees every agent of `wait_agents` live. With `metrics`, every
    component records into them (one registry for the whole process).
    """
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(await start_registry(conn, metrics=metrics))
        selector, stop_router = await start_semantic_router(conn, embedder, metrics=metrics)
        stack.push_async_callback(stop_router)
        for agent in agents:
            stack.push_async_callback(await start_worker(conn, agent, metrics=metrics))
        await selector.wait_routable(wait_agents, wait_s)
        return stack.pop_all().aclose
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def start_registry(conn: MeshConnection, *, metrics: Metrics | None = None) -> Stop:
    """Run a registry service (any number may run; they share their state in Redis)."""
    async with contextlib.AsyncExitStack() as stack:
        await _started(stack, RegistryService(conn, metrics=metrics))
        return stack.pop_all().aclose
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises


async def start_worker(
    conn: MeshConnection,
    agent: Agent,
    *,
    instance_id: str | None = None,
    grace_s: float = 30.0,
    metrics: Metrics | None = None,
) -> Stop:
    """Run `agent` as a worker holding a registry lease (waits until a registry answers)."""
    instance_id = instance_id or f"{agent.agent_id}-{new_id()[:12]}"
    session = RegistrySession(conn, agent.registration(instance_id))
    runtime = WorkerRuntime(
        agent, conn, instance_id=instance_id, membership=session, grace_s=grace_s, metrics=metrics
    )
    async with contextlib.AsyncExitStack() as stack:
        # close() drains with grace_s: stop consuming, finish in-flight tasks, hand the
        # rest back to the agent's queue, deregister; hurry() ends the grace at once
        await _started(stack, runtime)
        return Stopper(stack.pop_all().aclose, runtime.hurry)
    raise AssertionError("unreachable")  # pragma: no cover - the block returns or raises
