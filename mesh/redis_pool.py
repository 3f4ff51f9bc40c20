"""The Redis client of a process: one URL, or a master found through Redis Sentinel.

With ``MESH_REDIS_SENTINELS`` (``host:port,host:port``) the client asks the sentinels for
the current master of ``MESH_REDIS_SENTINEL_MASTER`` and asks again whenever a connection
to it fails, so a Sentinel failover is followed without a restart. ``MESH_REDIS_URL``
still gives the login, the database and TLS (``rediss://``, with redis-py's ``ssl_*``
query options such as ``ssl_ca_certs``) of the data connections.

While a script or function runs longer than ``busy-reply-threshold`` (5 s by default)
Redis answers every other command ``BUSY``; redis-py has no class for that answer, so
`redis_client` registers `RedisBusy` for it, which `mesh.retrying.TRANSIENT_ERRORS` holds:
a stall is retried like an outage, not treated as a bad request. A command waits for its
answer up to `REDIS_READ_TIMEOUT_S`, longer than that threshold, so a command sent into a
stall is answered BUSY (which says why) instead of timing out a moment before (redis-py 8
otherwise reads with a 5 s timeout, the threshold itself).
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as redis_asyncio
from redis._parsers.base import BaseParser
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.sentinel import Sentinel
from redis.exceptions import ResponseError

from mesh.errors import ConfigError

#: Redis connections one process opens at most (commands then wait for one)
REDIS_MAX_CONNECTIONS = 256
#: how long a command waits for its answer: past Redis' default ``busy-reply-threshold``
#: (5 s), so a stall is answered BUSY; a host that stops answering is lost after it
REDIS_READ_TIMEOUT_S = 10.0

Redis = redis_asyncio.Redis


class RedisBusy(ResponseError):
    """Redis answered BUSY: a script or function is running (``SCRIPT KILL`` or
    ``FUNCTION KILL`` as the operator ends it); the command may be tried again."""


def register_busy_reply() -> None:
    """Make redis-py raise `RedisBusy` for a ``BUSY`` answer (idempotent; every client of
    the process, its parsers share one table)."""
    BaseParser.EXCEPTION_CLASSES.setdefault("BUSY", RedisBusy)


def parse_sentinels(value: str) -> list[tuple[str, int]]:
    """``host:port,host:port`` -> [(host, port)]; a clear error for anything else."""
    out: list[tuple[str, int]] = []
    for item in (part.strip() for part in value.split(",")):
        if not item:
            continue
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ConfigError(
                f"{item!r} is not host:port "
                "(e.g. MESH_REDIS_SENTINELS=10.0.0.1:26379,10.0.0.2:26379)"
            )
        out.append((host.strip("[]"), int(port)))
    return out


def redis_client(
    url: str,
    *,
    sentinels: str = "",
    master: str = "mymaster",
    connect_timeout_s: float = 5.0,
) -> Redis:
    """A client for `url`, or for the Sentinel master `master` when `sentinels` is set."""
    register_busy_reply()
    common: dict[str, Any] = {
        "socket_connect_timeout": connect_timeout_s,
        "socket_timeout": REDIS_READ_TIMEOUT_S,
        "health_check_interval": 10,
    }
    if not sentinels:
        # a blocking pool: past `REDIS_MAX_CONNECTIONS` a command waits for a free
        # connection instead of failing (a process hosting hundreds of agents bursts)
        pool = redis_asyncio.BlockingConnectionPool.from_url(
            url, max_connections=REDIS_MAX_CONNECTIONS, timeout=connect_timeout_s * 4, **common
        )
        return redis_asyncio.Redis.from_pool(pool)  # closes the pool with the client
    parts = parse_url(url)
    login = {k: parts[k] for k in ("username", "password") if parts.get(k)}
    data: dict[str, Any] = {**common, **login, "db": parts.get("db", 0)}
    if parts.get("connection_class") is SSLConnection:
        # rediss://: TLS to the master and replicas, with the URL's TLS options
        # (ssl_ca_certs, ssl_certfile, ssl_keyfile, ssl_cert_reqs, ssl_check_hostname...);
        # the sentinels themselves are asked in plain text
        data["ssl"] = True
        data.update({k: v for k, v in parts.items() if k.startswith("ssl_")})
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis 8.2
        parse_sentinels(sentinels),
        sentinel_kwargs={"socket_connect_timeout": connect_timeout_s, "socket_timeout": 2.0},
        max_connections=REDIS_MAX_CONNECTIONS,
        **data,
    )
    client = sentinel.master_for(master, redis_class=_SentinelRedis)
    assert isinstance(client, _SentinelRedis)
    client.sentinel_manager = sentinel
    return client


class _SentinelRedis(redis_asyncio.Redis):
    """A master client that also closes its connections to the sentinels."""

    sentinel_manager: Sentinel | None = None

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager, self.sentinel_manager = self.sentinel_manager, None
        if manager is not None:
            for each in manager.sentinels:
                await each.aclose()


__all__ = [
    "REDIS_MAX_CONNECTIONS",
    "REDIS_READ_TIMEOUT_S",
    "RedisBusy",
    "parse_sentinels",
    "redis_client",
    "register_busy_reply",
]
