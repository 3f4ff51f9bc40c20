"""Routers are stateless competing consumers: two share the work, nothing lost or doubled."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.schemas import TaskEnvelope
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASKS = 1_000


async def test_two_routers_route_each_task_exactly_once(mesh_env: Any, add_cleanup: Any) -> None:
    conn_a: MeshConnection = await mesh_env("-router-a")
    conn_b: MeshConnection = await mesh_env("-router-b")
    conn_w: MeshConnection = await mesh_env("-worker")
    router_a = await start_router(conn_a, add_cleanup)
    router_b = await start_router(conn_b, add_cleanup)
    agent = effect_agent(conn_w)
    agent.max_concurrency = 64
    worker = await start_worker(conn_w, add_cleanup, agent)
    started = asyncio.get_running_loop().time()
    async with MeshClient(conn_w) as client:
        envelopes = [
            TaskEnvelope(capability="count", target="effect", payload={"n": i})
            for i in range(TASKS)
        ]
        results = await asyncio.gather(*(client.send(e, wait_s=60) for e in envelopes))
    took = asyncio.get_running_loop().time() - started
    assert all(r.status == "completed" for r in results)
    assert sorted(r.output["n"] for r in results if r.output) == list(range(TASKS))
    assert client.results_received == TASKS
    assert router_a.handled + router_b.handled == TASKS
    assert router_a.handled > TASKS // 10 and router_b.handled > TASKS // 10
    assert worker.executed == TASKS
    assert int(await conn_w.redis.get(conn_w.keys.side_effect("total"))) == TASKS
    store = TaskStore(conn_w.redis, conn_w.keys, conn_w.settings)
    for envelope in envelopes:
        states = [h["state"] for h in await store.history(envelope.task_id)]
        assert states.count("dispatched") == 1 and states[-1] == "completed"
    print(
        f"{TASKS} tasks through two routers in {took:.2f}s "
        f"(a={router_a.handled}, b={router_b.handled})"
    )
