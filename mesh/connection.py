"""`connect(settings)`: one AMQP connection and one Redis client, checked at start-up.

Fail fast on the first connect (a clear `ServiceUnavailable`), then recover quietly:
aio-pika's robust connection reconnects and restores channels, queues and consumers.

With several AMQP URLs (the nodes of one cluster, `Settings.amqp_urls`) the first connect
takes the first node that answers and fails only when none does; afterwards every lost
connection or failed attempt moves the next attempt to the next node (`FailoverConnection`),
and the robust channels re-declare their queues, bindings and consumers there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

import aio_pika
import redis.asyncio as redis_asyncio
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from redis.exceptions import RedisError
from yarl import URL

from mesh.config import Settings, mask_url
from mesh.errors import ConfigError, NotStarted, ServiceUnavailable
from mesh.keys import Keys
from mesh.lifecycle import Lifecycle
from mesh.redis_pool import redis_client
from mesh.topology import Topology

logger = logging.getLogger(__name__)

#: seconds between reconnect attempts once running (aio-pika's default is 5)
RECONNECT_INTERVAL_S = 1

START_HINT = "start it with `bash infra/up.sh` (or set MESH_AMQP_URL / MESH_REDIS_URL)"

Redis = redis_asyncio.Redis


class FailoverConnection(aio_pika.RobustConnection):
    """A robust connection to one of several nodes of a RabbitMQ cluster, round robin.

    aio-pika's `RobustConnection` retries its one URL forever. Every attempt goes through
    `Connection.connect`, which dials ``self.url``, and every end of an attempt -- a live
    connection lost, or a dial that failed (`UnderlayConnection.connect` reports it to the
    same callback before raising) -- goes through `_on_connection_close`. Moving ``self.url``
    to the next node there makes the reconnect loop, with its pause, its restore of channels
    (queues, exchanges, bindings, consumers re-declared) and its reconnect callbacks, go
    round the cluster unchanged. aio-pika's own options (``reconnect_interval``...) are read
    from the keyword arguments and the first URL's query; aiormq reads each URL's own query
    (``heartbeat``...) when it dials it.
    """

    def __init__(
        self,
        urls: Sequence[str | URL],
        start: int = 0,
        loop: asyncio.AbstractEventLoop | None = None,
        **kwargs: Any,
    ) -> None:
        if not urls:
            raise ValueError("FailoverConnection needs at least one URL")
        self.urls = tuple(URL(url) for url in urls)
        self.url_index = start % len(self.urls)
        #: how many times the connection moved to another node
        self.failovers = 0
        super().__init__(self.urls[self.url_index], loop=loop, **kwargs)

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        if len(self.urls) > 1 and not (self._close_called or self.is_closed):
            lost = str(self)
            self.url_index = (self.url_index + 1) % len(self.urls)
            self.url = self.urls[self.url_index]
            self.failovers += 1
            logger.warning("RabbitMQ node %s unavailable; next attempt: %s", lost, self)
        await super()._on_connection_close(closing)


class MeshConnection(Lifecycle):
    """The broker and Redis handles of one process, plus the names of its namespace."""

    def __init__(self, settings: Settings, name: str = "mesh") -> None:
        self.settings = settings
        self.name = name
        self.topology = Topology.from_settings(settings)
        self.keys = Keys(settings.namespace)
        self._amqp: AbstractRobustConnection | None = None
        self._redis: Redis | None = None

    @property
    def amqp(self) -> AbstractRobustConnection:
        if self._amqp is None:
            raise NotStarted("MeshConnection is not connected: call `await mesh.connect(settings)`")
        return self._amqp

    @property
    def redis(self) -> Redis:
        if self._redis is None:
            raise NotStarted("MeshConnection is not connected: call `await mesh.connect(settings)`")
        return self._redis

    @property
    def is_connected(self) -> bool:
        return self._amqp is not None and not self._amqp.is_closed

    async def open(self) -> None:
        """Connect to RabbitMQ and Redis; raises `ServiceUnavailable` naming what is down."""
        s = self.settings
        self._amqp = await self._open_amqp()
        client = redis_client(
            s.redis_url.get_secret_value(),
            sentinels=s.redis_sentinels,
            master=s.redis_sentinel_master,
            connect_timeout_s=s.connect_timeout_s,
        )
        try:
            await client.ping()
        except redis_asyncio.AuthenticationError as exc:
            logger.debug("Redis login refused: %r", exc)
            await self._abandon(client)
            raise ConfigError(
                f"Redis at {s.redis_url_masked} refused the login: check the password in "
                "MESH_REDIS_URL"
            ) from None
        except (OSError, RedisError) as exc:
            logger.debug("Redis connect failed: %r", exc)
            await self._abandon(client)
            where = s.redis_url_masked
            if s.redis_sentinels:
                where = f"master {s.redis_sentinel_master!r} of sentinels {s.redis_sentinels}"
            raise ServiceUnavailable("Redis", where, START_HINT) from None
        self._redis = client

    async def _open_amqp(self) -> FailoverConnection:
        """The first node of `Settings.amqp_urls` that answers, tried in order.

        Raises:
            ConfigError: a node refused the login or the vhost (every node of a cluster
                shares users and vhosts: the next would refuse it too).
            ServiceUnavailable: no node answered; the message names them all (masked).
        """
        s = self.settings
        urls = [url.get_secret_value() for url in s.amqp_urls]
        for index, url in enumerate(urls):
            connection = FailoverConnection(
                urls,
                start=index,
                client_properties={"connection_name": self.name},
                fail_fast=True,
                # after the first connect, recover quickly: 1 s between attempts
                reconnect_interval=RECONNECT_INTERVAL_S,
            )
            try:
                # the timeout also bounds each later reconnect attempt (a node that
                # vanished without a reset costs that long, then the next is tried)
                await asyncio.wait_for(
                    connection.connect(timeout=s.connect_timeout_s),
                    timeout=s.connect_timeout_s,
                )
            except aio_pika.exceptions.ProbableAuthenticationError as exc:
                logger.debug("AMQP login refused: %r", exc)
                await connection.close()
                user = urlsplit(url).username or "guest"
                raise ConfigError(
                    f"RabbitMQ at {mask_url(url)} refused the login of user {user!r}: check "
                    "the user and password in MESH_AMQP_URL (a broker refuses guest off "
                    "loopback)"
                ) from None
            except aio_pika.exceptions.ProtocolSyntaxError as exc:
                # the broker closed the handshake: most often a vhost that is not there or
                # that this user may not open
                logger.debug("AMQP handshake refused: %r", exc)
                await connection.close()
                vhost = urlsplit(url).path.lstrip("/") or "/"
                raise ConfigError(
                    f"RabbitMQ at {mask_url(url)} refused to open vhost {vhost!r}: create it "
                    "(rabbitmqctl add_vhost) and grant the user access, or fix MESH_AMQP_URL"
                ) from None
            except (OSError, TimeoutError, aio_pika.exceptions.AMQPError) as exc:
                logger.debug("AMQP connect to %s failed: %r", mask_url(url), exc)
                await connection.close()
                continue
            except BaseException:  # cancelled: stop its reconnect loop too
                await asyncio.shield(connection.close())
                raise
            if index:
                logger.info(
                    "RabbitMQ: connected to %s (node %d of %d)", connection, index + 1, len(urls)
                )
            return connection
        raise ServiceUnavailable("RabbitMQ", s.amqp_url_masked, START_HINT) from None

    async def _abandon(self, client: Redis) -> None:
        """Close what a failed `open()` had opened."""
        await client.aclose()
        if self._amqp is not None:
            await self._amqp.close()
        self._amqp = None

    async def channel(
        self, *, confirms: bool = True, prefetch: int | None = None
    ) -> AbstractChannel:
        """A new channel; publisher confirms on by default.

        On a confirmed channel a mandatory publish that no queue takes raises
        `aio_pika.exceptions.PublishError` instead of being dropped.
        """
        channel = await self.amqp.channel(publisher_confirms=confirms, on_return_raises=confirms)
        if prefetch is not None:
            await channel.set_qos(prefetch_count=prefetch)
        return channel

    async def close(self) -> None:
        """Close both connections; safe to call twice."""
        amqp, self._amqp = self._amqp, None
        client, self._redis = self._redis, None
        if amqp is not None and not amqp.is_closed:
            await amqp.close()
        if client is not None:
            await client.aclose()

    async def start(self) -> MeshConnection:
        """`open()` unless connected already (what ``async with`` calls)."""
        if self._amqp is None:
            await self.open()
        return self

    def __repr__(self) -> str:
        return (
            f"MeshConnection(amqp={self.settings.amqp_url_masked!r}, "
            f"redis={self.settings.redis_url_masked!r}, namespace={self.settings.namespace!r})"
        )


async def connect(settings: Settings, name: str = "mesh") -> MeshConnection:
    """Open a `MeshConnection`; use as ``async with await connect(settings) as conn:``."""
    conn = MeshConnection(settings, name)
    await conn.open()
    return conn
