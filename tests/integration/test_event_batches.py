"""Per-task events travel in batches on the real broker: one message per routing key,
marked ``x-mesh-batch``, read back by `events_of`; other events go at once; the
publisher's close sends what waits."""

from __future__ import annotations

from typing import Any

import pytest
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.messaging import Publisher
from mesh.schemas import Event
from mesh.topology import BATCH_HEADER, event_routing_key
from mesh.wire import events_of
from tests.access_mode import tap_queue_name
from tests.conftest import wait_until
from tests.integration.test_skeleton import echo_agent, start_mesh

pytestmark = pytest.mark.integration


async def _publisher(conn: MeshConnection, add_cleanup: Any, **settings: Any) -> Publisher:
    tuned = MeshConnection(conn.settings.model_copy(update=settings))
    await tuned.open()
    add_cleanup(tuned.close)
    publisher = Publisher(tuned)
    await publisher.start()
    add_cleanup(publisher.close)
    return publisher


async def _tap(conn: MeshConnection, add_cleanup: Any) -> AbstractQueue:
    channel = await conn.channel(confirms=False)
    add_cleanup(channel.close)
    await conn.topology.declare(channel)
    queue = await channel.declare_queue(tap_queue_name(conn), exclusive=True)
    await queue.bind(conn.topology.events, routing_key="#")
    return queue


async def _take(queue: AbstractQueue, count: int) -> list[AbstractIncomingMessage]:
    got: list[AbstractIncomingMessage] = []

    async def enough() -> bool:
        message = await queue.get(no_ack=True, fail=False)
        if message is not None:
            got.append(message)
        return len(got) >= count

    await wait_until(enough, timeout=10, interval=0.01)
    return got


async def test_per_task_events_of_one_key_arrive_as_one_batch_and_others_alone(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    queue = await _tap(conn, add_cleanup)
    publisher = await _publisher(
        conn, add_cleanup, event_batch_window_ms=200, event_batch_max_events=100
    )
    key = event_routing_key("task.completed", "r1")
    outcomes = [Event(type="task.completed", task_id=f"t{n}") for n in range(5)]
    for event in outcomes:
        await publisher.emit(event, key)
    alert = Event(type="alert.test_only", data={"n": 1})
    await publisher.emit(alert)  # not a per-task event: at once, alone
    messages = await _take(queue, 2)
    first, second = messages
    assert first.routing_key == "alert.test_only" and BATCH_HEADER not in (first.headers or {})
    assert events_of(first) == [alert]
    assert second.routing_key == key and second.headers[BATCH_HEADER] == 5
    assert events_of(second) == outcomes
    assert second.user_id == publisher.login
    assert (publisher.batches.messages, publisher.batches.events) == (1, 5)


async def test_a_full_batch_goes_at_once_and_a_lone_event_as_itself(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    queue = await _tap(conn, add_cleanup)
    publisher = await _publisher(
        conn, add_cleanup, event_batch_window_ms=50, event_batch_max_events=3
    )
    decisions = [Event(type="route.decision", task_id=f"t{n}") for n in range(4)]
    for event in decisions:
        await publisher.emit(event)
    full, lone = await _take(queue, 2)
    assert full.headers[BATCH_HEADER] == 3 and events_of(full) == decisions[:3]
    assert BATCH_HEADER not in (lone.headers or {}) and events_of(lone) == decisions[3:]


async def test_close_sends_the_events_that_wait(conn: MeshConnection, add_cleanup: Any) -> None:
    queue = await _tap(conn, add_cleanup)
    publisher = await _publisher(
        conn, add_cleanup, event_batch_window_ms=1000, event_batch_max_events=100
    )
    events = [Event(type="task.failed", task_id=f"t{n}") for n in range(2)]
    for event in events:
        await publisher.emit(event)
    batches = publisher.batches
    assert batches.pending == 2 and batches.messages == 0
    await publisher.close()
    assert batches.pending == 0 and batches.messages == 1
    (message,) = await _take(queue, 1)
    assert events_of(message) == events


async def test_without_a_window_every_event_is_its_own_message(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    queue = await _tap(conn, add_cleanup)
    publisher = await _publisher(conn, add_cleanup, event_batch_window_ms=0)
    events = [Event(type="task.completed", task_id=f"t{n}") for n in range(3)]
    for event in events:
        await publisher.emit(event)
    messages = await _take(queue, 3)
    assert [events_of(m) for m in messages] == [[e] for e in events]
    assert all(BATCH_HEADER not in (m.headers or {}) for m in messages)


async def test_the_publishers_of_one_connection_share_their_batches(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """A worker process runs a publisher per agent: their events still travel together,
    and one agent's stop leaves the others' batches to the publishers still open."""
    queue = await _tap(conn, add_cleanup)
    first = await _publisher(conn, add_cleanup, event_batch_window_ms=300)
    second = Publisher(first.conn)
    await second.start()
    add_cleanup(second.close)
    assert second.batches is first.batches
    key = event_routing_key("task.completed", "r1")
    events = [Event(type="task.completed", task_id=f"t{n}") for n in range(4)]
    for n, event in enumerate(events):
        await (first if n % 2 else second).emit(event, key)
    (message,) = await _take(queue, 1)
    assert message.headers[BATCH_HEADER] == 4 and events_of(message) == events
    await second.emit(events[0], key)
    await first.close()  # sends what waits, through the publisher still open
    (message,) = await _take(queue, 1)
    assert events_of(message) == events[:1]
    await second.emit(events[1], key)  # the batches go on without the first publisher
    (message,) = await _take(queue, 1)
    assert events_of(message) == events[1:2]


@pytest.mark.parametrize("progress", [True, False])
async def test_the_router_sends_task_dispatched_only_with_progress_events(
    conn: MeshConnection, add_cleanup: Any, progress: bool
) -> None:
    """``task.dispatched`` (a progress state) carries its route when `progress_events` is
    on and is not sent otherwise. Without a batch window the router's events arrive in
    the order it sent them, so once the task's ``route.decision`` (sent after the
    dispatch's events) is here, a ``task.dispatched`` would be too."""
    tuned = MeshConnection(
        conn.settings.model_copy(update={"progress_events": progress, "event_batch_window_ms": 0})
    )
    await tuned.open()
    add_cleanup(tuned.close)
    queue = await _tap(tuned, add_cleanup)
    router, workers = await start_mesh(tuned, echo_agent())
    add_cleanup(router.close)
    add_cleanup(workers[0].drain)
    async with MeshClient(tuned) as client:
        result = await client.request("echo this", {"n": 1}, target="echo", wait_s=10)
    assert result.status == "completed"
    events: list[Event] = []

    async def decided() -> bool:
        message = await queue.get(no_ack=True, fail=False)
        if message is not None:
            events.extend(e for e in events_of(message) if e.task_id == result.task_id)
        return any(e.type.startswith("route.decision") for e in events)

    await wait_until(decided, timeout=10, interval=0.01)
    dispatched = [e for e in events if e.type == "task.dispatched"]
    if not progress:
        assert dispatched == []
        return
    assert len(dispatched) == 1
    assert dispatched[0].agent_id == "echo"
    assert dispatched[0].data["route"]["strategy"] == "target"
