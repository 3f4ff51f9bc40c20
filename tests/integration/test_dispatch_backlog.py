"""A backlog is served, not failed (the faults issue, point 5).

The accept timeout is for agents that take no work. A dispatch that waited past it in the
queue of a live agent working through a backlog goes back into that queue, waiting up to
its deadline, instead of being counted as a reroute until `reroutes_exhausted`.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import (
    OrderedSelector,
    declare_idle_agents,
    start_router,
    start_worker,
)

pytestmark = pytest.mark.integration

TASKS = 120


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5, accept_timeout_ms=200
    )


class LiveSelector(OrderedSelector):
    """Candidates in order; every one of them is live (the registry's view, stubbed)."""

    def is_live(self, agent_id: str) -> bool:
        return agent_id in self.agent_ids


async def _burst(client: MeshClient, **fields: Any) -> Counter[str]:
    results = await asyncio.gather(
        *(
            client.request(
                "work", {"sleep_s": 0.05, "n": i}, timeout_ms=30_000, wait_s=40, **fields
            )
            for i in range(TASKS)
        )
    )
    return Counter(r.status for r in results)


@pytest.mark.parametrize("targeted", [True, False], ids=["target", "semantic"])
async def test_a_backlog_for_one_live_agent_completes(
    conn: MeshConnection, add_cleanup: Any, targeted: bool
) -> None:
    await start_router(conn, add_cleanup, LiveSelector("effect"))
    agent = effect_agent(conn)
    agent.max_concurrency = 4
    worker = await start_worker(conn, add_cleanup, agent)
    # 120 tasks of 50 ms on 4 slots take 1.5 s: most wait far past the 200 ms accept timeout
    async with MeshClient(conn) as client:
        statuses = await _burst(client, **({"target": "effect"} if targeted else {}))
    assert statuses == Counter({"completed": TASKS})
    assert worker.executed == TASKS


async def test_an_agent_that_takes_no_work_is_still_rerouted(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """Without a live lease the accept timeout still moves the task on: here to the end."""
    await start_router(conn, add_cleanup, OrderedSelector("effect"))
    await declare_idle_agents(conn, "effect")
    async with MeshClient(conn) as client:
        result = await client.request("work", timeout_ms=10_000, wait_s=15)
    assert result.status == "unroutable"
    assert result.error is not None and result.error.code == "no_agent"
