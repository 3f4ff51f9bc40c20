"""A retried task keeps its way back: the copy that went through the retry exchange
(routing key ``<delay>.agent.<id>``) and is then rejected comes back to a router, which
ends it, instead of being dead-lettered to nowhere."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import Agent, MeshClient, Reject, Retry, TaskContext
from mesh.connection import MeshConnection
from mesh.schemas import TaskEnvelope
from tests.integration.dispatch_kit import OrderedSelector, start_router, start_worker

pytestmark = pytest.mark.integration


async def test_a_retried_then_rejected_task_is_answered(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    agent = Agent("flip", "retries once, then rejects")
    attempts: list[int] = []

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        attempts.append(task.attempt)
        if task.attempt == 0:
            raise Retry("not yet", delay_ms=conn.topology.retry_delays_ms[0])
        raise Reject("not mine after all")

    await start_router(conn, add_cleanup, OrderedSelector("flip"))
    await start_worker(conn, add_cleanup, agent)
    async with MeshClient(conn) as client:
        result = await client.request("flip", timeout_ms=20_000, wait_s=20)
    assert attempts == [0, 1]
    assert result.status == "unroutable" and result.error is not None
    assert "flip" in str(result.error.details.get("excluded_agents"))
