"""`Retry(delay_ms=...)` waits in the next delay queue at least that long, and says so:
the ``task.retrying`` event carries the delay asked for and the one taken."""

from __future__ import annotations

import time
from typing import Any

import pytest

from mesh import Agent, MeshClient, Retry, TaskContext
from mesh.connection import MeshConnection
from mesh.schemas import Event, TaskEnvelope
from mesh.wire import events_of
from tests.conftest import wait_until
from tests.integration.dispatch_kit import OrderedSelector, start_router, start_worker

pytestmark = pytest.mark.integration


async def test_a_short_delay_is_rounded_up_to_the_next_delay_queue(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    first = conn.topology.retry_delays_ms[0]
    asked = max(1, first // 5)  # 200 ms with the default 1000 ms first queue
    agent = Agent("later", "retries once after a short delay")
    seen: list[float] = []

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        seen.append(time.monotonic())
        if task.attempt == 0:
            raise Retry("not yet", delay_ms=asked)
        return {"attempt": task.attempt}

    await start_router(conn, add_cleanup, OrderedSelector("later"))
    channel = await conn.channel(confirms=False)
    add_cleanup(channel.close)
    events = await channel.declare_queue(exclusive=True, auto_delete=True)
    await events.bind(conn.topology.events, routing_key="task.retrying")
    await start_worker(conn, add_cleanup, agent)
    async with MeshClient(conn) as client:
        result = await client.request("later", timeout_ms=20_000, wait_s=20)
    assert result.status == "completed" and result.output == {"attempt": 1}
    # the wait was the delay queue's, not the 200 ms asked for
    assert seen[1] - seen[0] >= first / 1000 * 0.95

    async def retrying() -> Event | None:
        message = await events.get(no_ack=True, fail=False)
        return None if message is None else events_of(message)[0]

    event = await wait_until(retrying, timeout=10, interval=0.1)
    assert event.type == "task.retrying" and event.task_id == result.task_id
    assert event.data["delay_ms"] == first and event.data["requested_delay_ms"] == asked
