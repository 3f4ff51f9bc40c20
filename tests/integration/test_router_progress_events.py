"""The router's ``task.dispatched`` is a progress event: sent, with the route, only when
``progress_events`` is on (the dispatch skips building it otherwise)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aio_pika.abc import AbstractQueue

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.schemas import Event
from mesh.wire import events_of
from tests.access_mode import tap_queue_name
from tests.integration.test_skeleton import echo_agent, start_mesh

pytestmark = pytest.mark.integration


async def _tap(conn: MeshConnection, add_cleanup: Any) -> AbstractQueue:
    channel = await conn.channel(confirms=False)
    add_cleanup(channel.close)
    await conn.topology.declare(channel)
    queue = await channel.declare_queue(tap_queue_name(conn), exclusive=True)
    await queue.bind(conn.topology.events, routing_key="task.#")
    return queue


async def _drain(queue: AbstractQueue) -> list[Event]:
    events: list[Event] = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        events.extend(events_of(message))
    return events


@pytest.mark.parametrize("progress", [True, False])
async def test_dispatched_event_only_with_progress_events(
    conn: MeshConnection, add_cleanup: Any, progress: bool
) -> None:
    tuned = MeshConnection(conn.settings.model_copy(update={"progress_events": progress}))
    await tuned.open()
    add_cleanup(tuned.close)
    queue = await _tap(tuned, add_cleanup)
    router, workers = await start_mesh(tuned, echo_agent())
    add_cleanup(router.close)
    add_cleanup(workers[0].drain)
    async with MeshClient(tuned) as client:
        result = await client.request("echo this", {"n": 1}, target="echo", wait_s=10)
    assert result.status == "completed"
    await asyncio.sleep(0.5)  # past the event batches' window
    events = [e for e in await _drain(queue) if e.task_id == result.task_id]
    assert "task.completed" in {e.type for e in events}
    dispatched = [e for e in events if e.type == "task.dispatched"]
    if not progress:
        assert dispatched == []
        return
    assert len(dispatched) == 1
    assert dispatched[0].agent_id == "echo"
    assert dispatched[0].data["route"]["strategy"] == "target"
