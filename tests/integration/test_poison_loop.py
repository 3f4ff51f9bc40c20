"""No poison loops: a dead letter the broker refuses (its dead queue is full under
reject-publish) ends the message -- counted, logged once, alerted once -- instead of
raising a transient error that requeues it for ever."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aio_pika
import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.management import Management
from mesh.messaging import DROPPED_ALERT, Publisher
from mesh.retrying import TRANSIENT_ERRORS
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import EventTap, start_router, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.access_off("sets its own dead-queue policy")]

#: messages the capped dead queue holds
CAP = 2


async def _cap_dead_invalid(conn: MeshConnection, add_cleanup: Any) -> str:
    """Declare the topology and cap ``<ns>.dead.invalid`` at `CAP` messages, reject-publish
    (as `mesh access provision`'s policy does by bytes); returns the queue's name."""
    channel = await conn.channel()
    add_cleanup(channel.close)
    await conn.topology.declare(channel)
    queue = conn.topology.dead_queue("invalid")
    management = Management(conn.settings)
    name = f"{conn.settings.namespace}.test-cap"
    await asyncio.to_thread(
        management.put_policy,
        "/",
        name,
        pattern=f"^{queue.replace('.', '[.]')}$",
        definition={"max-length": CAP, "overflow": "reject-publish"},
        priority=100,
    )
    add_cleanup(lambda: asyncio.to_thread(management.delete_policy, "/", name))

    async def applied() -> bool:
        return (await asyncio.to_thread(management.queue, queue)).get("policy") == name

    await wait_until(applied, timeout=10, interval=0.1)
    return queue


async def _depth(conn: MeshConnection, queue: str) -> int:
    channel = await conn.channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
        count = declared.declaration_result.message_count
        assert count is not None
        return count
    finally:
        await channel.close()


async def test_a_refused_dead_letter_is_dropped_counted_and_reported_once(
    conn: MeshConnection, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = await _cap_dead_invalid(conn, add_cleanup)
    tap = await EventTap.open(conn, add_cleanup, DROPPED_ALERT)
    publisher = Publisher(conn)
    await publisher.start()
    add_cleanup(publisher.close)

    for n in range(CAP):  # room for these: stored, nothing dropped
        await publisher.dead_letter("invalid", b"fill %d" % n)
    assert publisher.dropped == {}
    assert await _depth(conn, queue) == CAP

    with caplog.at_level(logging.WARNING, logger="mesh.messaging"):
        await publisher.dead_letter("invalid", b"one too many", task_id="t-1")  # returns
        assert publisher.dropped == {"invalid": 1}
        await wait_until(lambda: tap.of(DROPPED_ALERT), timeout=5)
        await publisher.dead_letter("invalid", b"and another", task_id="t-2")
        assert publisher.dropped == {"invalid": 2}

    [alert] = tap.of(DROPPED_ALERT)  # once a minute, however many were dropped
    assert alert.task_id == "t-1"
    assert alert.data == {"reason": "invalid", "queue": queue, "dropped": 1, "total": 1}
    warnings = [r for r in caplog.records if "dead letter dropped" in r.getMessage()]
    assert len(warnings) == 1 and "reason=invalid" in warnings[0].getMessage()
    assert await _depth(conn, queue) == CAP  # the cap held; the first letters are kept


async def test_a_broker_that_is_away_still_raises(conn: MeshConnection, add_cleanup: Any) -> None:
    publisher = Publisher(conn)
    await publisher.start()
    add_cleanup(publisher.close)
    channel = await conn.channel()
    add_cleanup(channel.close)
    await conn.topology.declare(channel)
    await publisher.channel.close()  # the confirm channel is gone: an outage, not a refusal
    with pytest.raises(TRANSIENT_ERRORS):
        await publisher.dead_letter("invalid", b"comes back")
    assert publisher.dropped == {}


async def test_a_router_with_a_full_dead_queue_keeps_routing(
    conn: MeshConnection, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    queue = await _cap_dead_invalid(conn, add_cleanup)
    router = await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    channel = await conn.channel()
    add_cleanup(channel.close)
    ingress = await channel.get_exchange(conn.topology.ingress, ensure=False)
    garbage = 3 * CAP
    with caplog.at_level(logging.WARNING, logger="mesh.messaging"):
        for n in range(garbage):
            await ingress.publish(
                aio_pika.Message(b"not json %d" % n), routing_key=conn.topology.ingress_key
            )
        # every bad body handled once: the refused ones were dropped, not requeued
        await wait_until(lambda: router.publisher.dropped.get("invalid") == garbage - CAP)
        async with MeshClient(conn) as client:
            result = await client.request("do", {"n": 1}, target="effect", wait_s=20)
    assert result.status == "completed"
    assert await _depth(conn, queue) == CAP
    assert router.publisher.dropped == {"invalid": garbage - CAP}
    assert router.handled == garbage + 1  # no message came round again
