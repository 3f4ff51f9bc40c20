"""`mesh.wire.Subscriber` against the real broker: each settle policy, and refused access.

Each test owns a queue ``<ns>.wire.<id>`` that dead-letters to ``<ns>.wire.<id>.dead``, so
a rejected delivery can be seen where it went; the namespace is purged at teardown.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from pydantic import SecretStr

from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.management import Management
from mesh.wire import AckAfter, AckBatched, Manual, NoAck, OutageBackoff, Subscriber
from tests.conftest import wait_until
from tests.integration.test_connection_failover import Relay, with_urls

pytestmark = pytest.mark.integration


class Queues:
    """A work queue and the queue its rejected deliveries are dead-lettered to."""

    def __init__(self, conn: MeshConnection) -> None:
        self.conn = conn
        self.name = f"{conn.topology.namespace}.wire.{uuid.uuid4().hex[:8]}"
        self.dead = f"{self.name}.dead"

    async def declare(self) -> Queues:
        channel = await self.conn.channel(confirms=False)
        await channel.declare_queue(self.dead, durable=True)
        await channel.declare_queue(
            self.name,
            durable=True,
            arguments={"x-dead-letter-exchange": "", "x-dead-letter-routing-key": self.dead},
        )
        await channel.close()
        return self

    async def publish(self, *bodies: bytes) -> None:
        channel = await self.conn.channel()
        for body in bodies:
            await channel.default_exchange.publish(aio_pika.Message(body), routing_key=self.name)
        await channel.close()

    async def exists(self, name: str) -> bool:
        try:
            await self.count(name)
        except aiormq.exceptions.ChannelLockedResource:
            return True  # exclusive to another connection: it exists
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        return True

    async def count(self, name: str) -> int:
        """Messages ready in `name` (none unacked: every subscriber of it is closed)."""
        channel = await self.conn.channel(confirms=False)
        try:
            queue = await channel.declare_queue(name, passive=True)
            return int(queue.declaration_result.message_count or 0)
        finally:
            await channel.close()


@pytest.fixture
async def queues(conn: MeshConnection) -> Queues:
    return await Queues(conn).declare()


def recorder(
    seen: list[AbstractIncomingMessage],
    fail: Callable[[AbstractIncomingMessage], BaseException | None] = lambda m: None,
) -> Callable[[AbstractIncomingMessage], Awaitable[None]]:
    async def handle(message: AbstractIncomingMessage) -> None:
        seen.append(message)
        exc = fail(message)
        if exc is not None:
            raise exc

    return handle


async def test_ack_after_acks_what_was_handled(conn: MeshConnection, queues: Queues) -> None:
    seen: list[AbstractIncomingMessage] = []
    policy = AckAfter("wire tests")
    async with Subscriber(conn, queues.name, recorder(seen), policy, prefetch=10) as sub:
        await queues.publish(b"one", b"two", b"three")
        await wait_until(lambda: len(seen) == 3)
        assert sub.consuming and sub.delivered == 3
    assert sorted(m.body for m in seen) == [b"one", b"three", b"two"]
    assert await queues.count(queues.name) == 0
    assert (policy.outages, policy.bugs) == (0, 0)


async def test_a_bug_rejects_without_requeue(conn: MeshConnection, queues: Queues) -> None:
    seen: list[AbstractIncomingMessage] = []
    policy = AckAfter("wire tests")

    def bug(message: AbstractIncomingMessage) -> BaseException | None:
        return ValueError("a bug") if message.body == b"bad" else None

    async with Subscriber(conn, queues.name, recorder(seen, bug), policy):
        await queues.publish(b"bad", b"good")
        await wait_until(lambda: len(seen) == 2)
        # rejected without requeue: dead-lettered, never delivered again
        await wait_until(lambda: queues.count(queues.dead))
    assert [m.body for m in seen].count(b"bad") == 1
    assert await queues.count(queues.dead) == 1
    assert await queues.count(queues.name) == 0
    assert policy.bugs == 1


async def test_an_outage_requeues_and_the_redelivery_is_handled(
    conn: MeshConnection, queues: Queues
) -> None:
    seen: list[AbstractIncomingMessage] = []
    # outages are held a millisecond or two here, not up to two seconds
    policy = AckAfter("wire tests", backoff=OutageBackoff(first_s=0.001, max_s=0.002))

    def first_time(message: AbstractIncomingMessage) -> BaseException | None:
        return None if message.redelivered else ConnectionError("redis away")

    async with Subscriber(conn, queues.name, recorder(seen, first_time), policy):
        await queues.publish(b"task")
        await wait_until(lambda: len(seen) == 2)
    assert [bool(m.redelivered) for m in seen] == [False, True]
    assert policy.outages == 1 and policy.backoff.outages == 0  # reset by the success
    assert await queues.count(queues.name) == 0
    assert await queues.count(queues.dead) == 0


async def test_on_bug_replaces_the_reject_and_the_body_is_acked(
    conn: MeshConnection, queues: Queues
) -> None:
    handed: list[tuple[bytes, str]] = []

    async def dead_letter(message: AbstractIncomingMessage, exc: Exception) -> None:
        handed.append((message.body, str(exc)))

    policy = AckBatched("wire tests", on_bug=dead_letter)
    seen: list[AbstractIncomingMessage] = []
    async with Subscriber(conn, queues.name, recorder(seen, lambda m: KeyError("x")), policy):
        await queues.publish(b"unroutable")
        await wait_until(lambda: handed)
    assert handed == [(b"unroutable", "'x'")]
    assert await queues.count(queues.name) == 0
    assert await queues.count(queues.dead) == 0


async def test_no_ack_loses_what_was_not_handled(conn: MeshConnection, queues: Queues) -> None:
    seen: list[AbstractIncomingMessage] = []

    def some_fail(message: AbstractIncomingMessage) -> BaseException | None:
        return {b"outage": ConnectionError("away"), b"bug": ValueError("bug")}.get(message.body)

    async with Subscriber(conn, queues.name, recorder(seen, some_fail), NoAck("wire tests")):
        await queues.publish(b"outage", b"bug", b"fine")
        await wait_until(lambda: len(seen) == 3)
    # the broker settled each on delivery: nothing back in the queue, nothing dead-lettered
    assert await queues.count(queues.name) == 0
    assert await queues.count(queues.dead) == 0
    assert len(seen) == 3


async def test_ack_batched_acks_a_whole_burst_in_few_frames(
    conn: MeshConnection, queues: Queues
) -> None:
    burst = 50
    seen: list[AbstractIncomingMessage] = []
    everyone = asyncio.Event()

    async def handle(message: AbstractIncomingMessage) -> None:
        seen.append(message)
        if len(seen) == burst:
            everyone.set()
        await everyone.wait()  # all finish together: their acks share frames

    policy = AckBatched("wire tests")
    async with Subscriber(conn, queues.name, handle, policy, prefetch=burst):
        await queues.publish(*(b"%d" % i for i in range(burst)))
        await wait_until(lambda: policy.batcher.acked == burst)
    assert 1 <= policy.batcher.frames < burst
    assert await queues.count(queues.name) == 0


async def test_manual_leaves_acks_to_the_handler(conn: MeshConnection, queues: Queues) -> None:
    held: list[AbstractIncomingMessage] = []

    async def hold(message: AbstractIncomingMessage) -> None:
        held.append(message)  # settled later, by "its own settler"

    sub = Subscriber(conn, queues.name, hold, Manual("wire tests"), prefetch=5)
    await sub.start()
    await queues.publish(b"a", b"b")
    await wait_until(lambda: len(held) == 2)
    await sub.stop()
    await held[0].ack()  # the channel stays open after stop: a drain settles in-flight work
    await sub.close()
    await sub.close()  # idempotent
    assert not sub.started
    # the one acked is gone; the one nobody settled went back to the queue
    assert await queues.count(queues.name) == 1


async def test_a_user_that_may_not_consume_leaves_an_optional_subscriber_disabled(
    conn: MeshConnection, queues: Queues, settings: Settings, add_cleanup: Any
) -> None:
    management = Management(settings)
    user, password = f"test-wire-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    await asyncio.to_thread(management.put_user, user, password)
    add_cleanup(lambda: asyncio.to_thread(management.delete_user, user))
    await asyncio.to_thread(
        management.put_permissions, "/", user, configure="^$", write="^$", read="^$"
    )
    nobody = settings.model_copy(
        update={"amqp_url": SecretStr(f"amqp://{user}:{password}@127.0.0.1/")}
    )
    outsider = await connect(nobody, name="wire-refused")
    add_cleanup(outsider.close)

    seen: list[AbstractIncomingMessage] = []
    optional = Subscriber(outsider, queues.name, recorder(seen), AckAfter("x"), optional=True)
    await optional.start()
    assert optional.disabled is not None and "ACCESS_REFUSED" in optional.disabled
    assert not optional.started
    await optional.close()

    required = Subscriber(outsider, queues.name, recorder(seen), AckAfter("x"))
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await required.start()
    assert not required.started
    # the process carries on: the connection still opens channels
    channel = await outsider.channel(confirms=False)
    await channel.close()


@pytest.fixture
async def relays() -> Any:
    started = [await Relay().start(), await Relay().start()]
    yield started
    for relay in started:
        if relay.server is not None and relay.server.is_serving():
            await relay.kill()


async def test_both_kinds_of_subscriber_consume_again_after_a_reconnect(
    conn: MeshConnection, queues: Queues, settings: Settings, relays: list[Relay], add_cleanup: Any
) -> None:
    """A queue got by name (passive) and one from a declare function (exclusive, so the
    broker deletes it with the lost connection) are both consumed again once the robust
    connection is back, on the next "node"."""
    first, second = relays
    moving = await connect(with_urls(settings, first.url, second.url), "wire-reconnect")
    add_cleanup(moving.close)
    reconnected = asyncio.Event()
    moving.amqp.reconnect_callbacks.add(lambda *_: reconnected.set())
    own = f"{queues.name}.own"

    async def declare(channel: AbstractChannel) -> AbstractQueue:
        return await channel.declare_queue(own, exclusive=True, auto_delete=True)

    named: list[bytes] = []
    declared: list[bytes] = []

    async def by_name(message: AbstractIncomingMessage) -> None:
        named.append(message.body)

    async def by_declare(message: AbstractIncomingMessage) -> None:
        declared.append(message.body)

    for sub in (
        Subscriber(moving, queues.name, by_name, AckAfter("named")),
        Subscriber(moving, declare, by_declare, AckAfter("declared")),
    ):
        await sub.start()
        add_cleanup(sub.close)
    channel = await conn.channel()
    add_cleanup(channel.close)

    async def publish(body: bytes) -> None:
        for name in (queues.name, own):
            await channel.default_exchange.publish(aio_pika.Message(body), routing_key=name)

    await publish(b"before")
    await wait_until(lambda: named == declared == [b"before"])
    await first.kill()
    await asyncio.wait_for(reconnected.wait(), timeout=15)
    await wait_until(lambda: queues.exists(own), timeout=10)  # declared again
    await publish(b"after")
    await wait_until(lambda: named == declared == [b"before", b"after"], timeout=10)
