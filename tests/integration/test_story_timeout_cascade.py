"""The timeout cascade (seed 000 section 4.2): A hands off to B, B to C, and C fails.

Without breakers on targeted paths every request waits on C and fails late, A -> B -> C.
Now a handoff (a task with a `target`) consults its target's circuit breaker: once C's
and then B's breakers open, the router answers A's handoff at once with
``downstream_busy``, A catches `mesh.DownstreamBusy` and answers with a degraded reply,
and C receives no new task until its half-open probe.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from mesh import Agent, DownstreamBusy, MeshClient, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.router.embedding import Embedder
from mesh.schemas import TaskEnvelope
from mesh.services import build_selector
from tests.conftest import wait_until
from tests.integration.routing_kit import SemanticMesh

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    # the breaker opens on 3 failures of 4 calls and stays open for the whole test
    return Settings.from_env(
        namespace=namespace,
        heartbeat_s=0.5,
        lease_ttl_s=1.5,
        breaker_min_calls=3,
        breaker_open_s=60.0,
    )


def cascade() -> tuple[Agent, Agent, Agent, list[str]]:
    runs: list[str] = []
    a = Agent("front", "Answers customers about their orders")
    b = Agent("orders", "Looks orders up in the order system")
    c = Agent("inventory", "Checks the stock of a product")

    @a.handler
    async def front(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        runs.append("front")
        try:
            result = await ctx.handoff("look the order up", task.payload, target="orders")
        except DownstreamBusy as busy:
            return {"answer": "we will get back to you", "degraded": True, "busy": busy.target}
        return {"answer": result.output, "degraded": False}

    @b.handler
    async def orders(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        runs.append("orders")
        result = await ctx.handoff("check the stock", task.payload, target="inventory")
        if result.status != "completed":
            raise RuntimeError(f"inventory said {result.status}")
        return {"order": "ok"}

    @c.handler
    async def inventory(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        runs.append("inventory")
        raise RuntimeError("the stock database does not answer")

    return a, b, c, runs


async def test_timeout_cascade_a_broken_downstream_is_answered_at_once_and_called_no_more(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    a, b, c, runs = cascade()
    await mesh.start(a, b, c)
    async with MeshClient(conn) as client:
        degraded = None
        for n in range(12):  # C fails, B fails with it, until the breakers open
            result = await client.request("where is my order", {"n": n}, target="front")
            assert result.status == "completed", result.error
            if result.output and result.output["degraded"]:
                degraded = n
                break
        assert degraded is not None, "the breakers never opened"
        inventory_runs = runs.count("inventory")
        assert inventory_runs >= 3  # what opened C's breaker
        for n in range(5):
            started = time.monotonic()
            result = await client.request("where is my order", {"n": 100 + n}, target="front")
            took = time.monotonic() - started
            assert result.status == "completed"
            assert result.output == {
                "answer": "we will get back to you",
                "degraded": True,
                "busy": "orders",
            }
            assert took < 2.0  # nothing waits on the broken chain (loaded CI: not 100 ms)
        assert runs.count("inventory") == inventory_runs, "C got no new task"


async def test_a_targeted_task_to_an_agent_whose_breaker_is_open_fails_at_once(
    mesh: SemanticMesh, conn: MeshConnection, embedder: Embedder
) -> None:
    _, _, c, runs = cascade()
    await mesh.start(c)
    async with MeshClient(conn) as client:
        for n in range(3):
            failed = await client.request("check the stock", {"n": n}, target="inventory")
            assert failed.status == "failed"
            assert failed.error is not None and failed.error.code == "handler_error"
        selector = mesh.selector
        assert selector is not None
        await wait_until(lambda: selector.breakers.state("inventory") == "open", timeout=10)
        # shared: a router that saw none of the failures refuses the agent too
        other, stop_other = await build_selector(conn, embedder)
        try:
            assert other.breakers.state("inventory") == "closed"
            assert not await other.admits("inventory")
            assert await other.admits("nobody-failing")
        finally:
            await stop_other()
        assert await conn.redis.get(conn.keys.breaker("inventory")) is not None
        started = time.monotonic()
        busy = await client.request("check the stock", {"n": 9}, target="inventory")
        assert time.monotonic() - started < 2.0
        assert busy.status == "failed"
        assert busy.error is not None and busy.error.code == "downstream_busy"
    assert runs.count("inventory") == 3
