"""`connect(settings)`: one AMQP connection and one Redis client, checked at start-up.

Fail fast on the first connect (a clear `ServiceUnavailable`), then recover quietly:
aio-pika's robust connection reconnects and restores channels, queues and consumers.
"""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import aio_pika
import redis.asyncio as redis_asyncio
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from redis.exceptions import RedisError

from mesh.config import Settings
from mesh.errors import ConfigError, NotStarted, ServiceUnavailable
from mesh.keys import Keys
from mesh.lifecycle import Lifecycle
from mesh.topology import Topology

logger = logging.getLogger(__name__)

#: seconds between reconnect attempts once running (aio-pika's default is 5)
RECONNECT_INTERVAL_S = 1

#: Redis connections one process opens at most (commands then wait for one)
REDIS_MAX_CONNECTIONS = 256

START_HINT = "start it with `bash infra/up.sh` (or set MESH_AMQP_URL / MESH_REDIS_URL)"

Redis = redis_asyncio.Redis


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
        try:
            self._amqp = await asyncio.wait_for(
                aio_pika.connect_robust(
                    s.amqp_url.get_secret_value(),
                    client_properties={"connection_name": self.name},
                    fail_fast="true",
                    # after the first connect, recover quickly: 1 s between attempts
                    reconnect_interval=str(RECONNECT_INTERVAL_S),
                ),
                timeout=s.connect_timeout_s,
            )
        except aio_pika.exceptions.ProbableAuthenticationError as exc:
            logger.debug("AMQP login refused: %r", exc)
            user = urlsplit(s.amqp_url.get_secret_value()).username or "guest"
            raise ConfigError(
                f"RabbitMQ at {s.amqp_url_masked} refused the login of user {user!r}: check "
                "the user and password in MESH_AMQP_URL (a broker refuses guest off loopback)"
            ) from None
        except aio_pika.exceptions.ProtocolSyntaxError as exc:
            # the broker closed the handshake: most often a vhost that is not there or
            # that this user may not open
            logger.debug("AMQP handshake refused: %r", exc)
            vhost = urlsplit(s.amqp_url.get_secret_value()).path.lstrip("/") or "/"
            raise ConfigError(
                f"RabbitMQ at {s.amqp_url_masked} refused to open vhost {vhost!r}: create it "
                "(rabbitmqctl add_vhost) and grant the user access, or fix MESH_AMQP_URL"
            ) from None
        except (OSError, TimeoutError, aio_pika.exceptions.AMQPError) as exc:
            logger.debug("AMQP connect failed: %r", exc)
            raise ServiceUnavailable("RabbitMQ", s.amqp_url_masked, START_HINT) from None
        # a blocking pool: past `REDIS_MAX_CONNECTIONS` a command waits for a free
        # connection instead of failing (a process hosting hundreds of agents bursts)
        pool = redis_asyncio.BlockingConnectionPool.from_url(
            s.redis_url.get_secret_value(),
            max_connections=REDIS_MAX_CONNECTIONS,
            timeout=s.connect_timeout_s * 4,
            socket_connect_timeout=s.connect_timeout_s,
            health_check_interval=10,
        )
        client = redis_asyncio.Redis.from_pool(pool)  # closes the pool with the client
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
            raise ServiceUnavailable("Redis", s.redis_url_masked, START_HINT) from None
        self._redis = client

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
