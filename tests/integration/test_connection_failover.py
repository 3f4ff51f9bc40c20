"""Several AMQP URLs without a cluster: the first reachable one is taken, all down is one
clear error, and a lost node sends the reconnect to the next URL with consumers restored.

Two "nodes" here are TCP relays to the one shared broker: closing a relay is, for the
client, exactly a node that died (its connections reset, its port refusing).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

import aio_pika
import pytest

from mesh.config import Settings
from mesh.connection import FailoverConnection, MeshConnection, connect
from mesh.errors import ServiceUnavailable
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

BROKER = ("127.0.0.1", 5672)


def closed_port() -> int:
    """A loopback port nobody listens on (bound then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


class Relay:
    """A TCP relay to the shared broker that can be killed like a node."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.port = 0
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> Relay:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*BROKER)
        self._writers.update((writer, up_writer))

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def kill(self) -> None:
        """Stop listening and reset every relayed connection (a SIGKILLed node)."""
        assert self.server is not None
        self.server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        await self.server.wait_closed()


@pytest.fixture
async def relays() -> Any:
    started = [await Relay().start(), await Relay().start()]
    yield started
    for relay in started:
        if relay.server is not None and relay.server.is_serving():
            await relay.kill()


def with_urls(settings: Settings, *urls: str) -> Settings:
    return settings.model_copy(update={"amqp_url": Settings(amqp_url=",".join(urls)).amqp_url})


async def test_the_first_reachable_url_is_taken(settings: Settings, add_cleanup: Any) -> None:
    s = with_urls(
        settings,
        f"amqp://guest:sekret@127.0.0.1:{closed_port()}/",
        "amqp://guest:guest@127.0.0.1:5672/",
    )
    conn = await connect(s, name="failover-first")
    add_cleanup(conn.close)
    amqp = conn.amqp
    assert isinstance(amqp, FailoverConnection)
    assert (amqp.url.port, amqp.url_index) == (5672, 1)
    channel = await conn.channel()
    queue = await channel.declare_queue(exclusive=True)
    await channel.default_exchange.publish(aio_pika.Message(b"hi"), routing_key=queue.name)
    message = await wait_until(lambda: queue.get(no_ack=True, fail=False))
    assert message.body == b"hi"


async def test_all_urls_down_is_one_error_naming_them_masked(settings: Settings) -> None:
    ports = closed_port(), closed_port()
    s = with_urls(settings, *(f"amqp://guest:sekret@127.0.0.1:{p}/" for p in ports))
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable) as info:
        await connect(s, name="failover-none")
    message = str(info.value)
    assert time.monotonic() - started < s.connect_timeout_s
    assert "sekret" not in message
    for port in ports:
        assert f"amqp://guest:******@127.0.0.1:{port}/" in message
    assert message.startswith("RabbitMQ at ") and "unreachable" in message


async def test_a_lost_node_fails_over_to_the_next_url_with_consumers_restored(
    settings: Settings, relays: list[Relay], add_cleanup: Any
) -> None:
    first, second = relays
    conn: MeshConnection = await connect(with_urls(settings, first.url, second.url), "failover")
    add_cleanup(conn.close)
    amqp = conn.amqp
    assert isinstance(amqp, FailoverConnection)
    assert amqp.url.port == first.port
    reconnected = asyncio.Event()
    amqp.reconnect_callbacks.add(lambda *_: reconnected.set())
    channel = await conn.channel()
    queue = await channel.declare_queue(f"{settings.namespace}.failover", auto_delete=True)
    add_cleanup(lambda: conn.amqp.is_closed or channel.close())
    got: list[bytes] = []

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        got.append(message.body)
        await message.ack()

    await queue.consume(on_message)
    await channel.default_exchange.publish(aio_pika.Message(b"before"), routing_key=queue.name)
    await wait_until(lambda: got == [b"before"])

    killed = time.monotonic()
    await first.kill()
    await asyncio.wait_for(reconnected.wait(), timeout=15)
    took = time.monotonic() - killed
    assert amqp.url.port == second.port and amqp.failovers >= 1
    # the robust channel re-declared the queue and its consumer on the new "node"
    await channel.default_exchange.publish(aio_pika.Message(b"after"), routing_key=queue.name)
    await wait_until(lambda: got == [b"before", b"after"], timeout=10)
    print(f"failed over to the second URL in {took:.2f}s")
