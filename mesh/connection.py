"""`connect(settings)`: one AMQP connection and one Redis client, checked at start-up.

Fail fast on the first connect (a clear `ServiceUnavailable`), then recover quietly:
aio-pika's robust connection reconnects and restores channels, queues and consumers.

With several AMQP URLs (the nodes of one cluster, `Settings.amqp_urls`) the first connect
takes the first node that answers and fails only when none does; afterwards every lost
connection or failed attempt moves the next attempt to the next node (`FailoverConnection`),
and the robust channels re-declare their queues, bindings and consumers there.

TLS (``amqps://``, ``rediss://``) takes the libraries' own query options (aiormq:
``cafile``, ``capath``, ``certfile``, ``keyfile``, ``no_verify_ssl``; redis-py:
``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``, ``ssl_cert_reqs``...). A failed
handshake (an unknown CA, a name the certificate does not hold, a port without TLS), a
refused login or ACL, and a TLS option naming a missing file are `ConfigError`s naming the
fix; only a service that does not answer is `ServiceUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import ssl
from collections.abc import Sequence
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aio_pika
import redis.asyncio as redis_asyncio
from aio_pika.abc import AbstractChannel, AbstractRobustConnection
from redis.exceptions import NoPermissionError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from yarl import URL

from mesh.access.roles import vhost_of
from mesh.config import Settings, mask_url
from mesh.errors import ConfigError, NotStarted, ServiceUnavailable
from mesh.hints import start_hint
from mesh.keys import Keys
from mesh.lifecycle import Lifecycle
from mesh.logs import quiet_connection_noise
from mesh.outage import OutageLog, Outages, outage_log
from mesh.redis_pool import redis_client
from mesh.schemas import new_id
from mesh.topology import Topology

logger = logging.getLogger(__name__)

#: seconds between reconnect attempts once running (aio-pika's default is 5)
RECONNECT_INTERVAL_S = 1

Redis = redis_asyncio.Redis

#: OpenSSL verify codes: the certificate names another host / another IP address
_NAME_MISMATCH = frozenset({62, 64})
#: OpenSSL verify codes: no trusted CA signed the chain (unknown issuer, self-signed...)
_UNTRUSTED = frozenset({2, 18, 19, 20, 21, 27})
#: the other end answered a TLS ClientHello with something that is not TLS
_NOT_TLS = frozenset(
    {"WRONG_VERSION_NUMBER", "UNKNOWN_PROTOCOL", "HTTP_REQUEST", "RECORD_LAYER_FAILURE"}
)
#: TLS options of a URL's query that name files: amqps:// (aiormq), rediss:// (redis-py)
AMQP_TLS_FILES = ("cafile", "capath", "certfile", "keyfile")
REDIS_TLS_FILES = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile")


def find_tls_error(exc: BaseException | None) -> ssl.SSLError | None:
    """The TLS handshake failure behind `exc` (its causes, contexts, a URLError's reason).

    An EOF or a close in the middle of a handshake is not one: that is a lost connection
    (a node going down, a proxy without a backend), reported as unreachable.
    """
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ssl.SSLError):
            if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
                return None
            return exc
        reason = getattr(exc, "reason", None)  # urllib.error.URLError wraps its OSError
        if isinstance(reason, BaseException) and id(reason) not in seen:
            exc = reason
            continue
        exc = exc.__cause__ or exc.__context__
    return None


def tls_reason(error: ssl.SSLError) -> str:
    """OpenSSL's reason in a few words (``certificate verify failed: certificate has expired``)."""
    if isinstance(error, ssl.SSLCertVerificationError) and error.verify_message:
        return f"certificate verify failed: {str(error.verify_message).rstrip('.')}"
    text = error.args[1] if len(error.args) > 1 and isinstance(error.args[1], str) else str(error)
    text = re.sub(r"^\[[A-Z0-9_]+: [A-Z0-9_]+\]\s*|\s*\(_ssl\.c:\d+\)$", "", text).strip()
    return text or str(error.reason or "TLS handshake failed").lower().replace("_", " ")


def tls_config_error(
    service: str,
    where: str,
    error: ssl.SSLError,
    *,
    variable: str,
    ca_option: str,
    ca_given: str | None,
    plain_fix: str,
) -> ConfigError:
    """One sentence for a failed TLS handshake: where, OpenSSL's reason, and the fix.

    Args:
        service: what was dialled (``RabbitMQ``).
        where: its URL, masked (the query is left out: it may hold a key's password).
        variable: the setting holding the URL (``MESH_AMQP_URL``).
        ca_option: the option naming the CA: a query parameter of `variable`'s URL
            (``cafile``) or a setting of its own (``MESH_MANAGEMENT_CA_FILE``).
        ca_given: the CA file (or folder) configured already, if any.
        plain_fix: what to do when the server does not speak TLS on that port.
    """
    if ca_option.startswith("MESH_"):
        set_ca, ca_place = f"set {ca_option}=/path/ca.pem", ca_option
    else:
        set_ca = f"set {ca_option}=/path/ca.pem in {variable}'s query"
        ca_place = f"{ca_option} in {variable}'s query"
    code = getattr(error, "verify_code", None)
    if code in _NAME_MISMATCH:
        fix = (
            "connect by a host name or IP address that the server's certificate names "
            "(its subjectAltName), or reissue the certificate for this one"
        )
    elif code in _UNTRUSTED:
        fix = (
            f"{ca_given} does not hold the CA that signed the server's certificate: point "
            f"{ca_place} at that CA"
            if ca_given
            else f"{set_ca} (the CA that signed the server's certificate)"
        )
    elif code is not None:
        fix = "renew or fix the server's certificate"
    elif error.reason in _NOT_TLS:
        fix = f"the server does not speak TLS on that port: {plain_fix}"
    else:
        fix = f"check the TLS options of {variable} (a client certificate, a CA)"
    return ConfigError(
        f"{service} at {without_query(where)} failed the TLS handshake ({tls_reason(error)}): {fix}"
    )


def warn_unverified_tls(url: str, variable: str) -> bool:
    """Log a WARNING when `url` turns off the check of the server's certificate (aiormq's
    ``no_verify_ssl`` other than 0, redis-py's ``ssl_cert_reqs=none``); True when it does."""
    query = parse_qs(urlsplit(url).query)
    amqp_off = any(value != "0" for value in query.get("no_verify_ssl", []))
    redis_off = any(value.lower() == "none" for value in query.get("ssl_cert_reqs", []))
    if not (amqp_off or redis_off):
        return False
    option = "no_verify_ssl" if amqp_off else "ssl_cert_reqs=none"
    logger.warning(
        "%s (%s): %s: the server's certificate is not checked, so anyone on the path can "
        "pose as it and read the mesh's traffic and passwords; drop it and name the CA "
        "instead (%s=PEM)",
        variable,
        without_query(mask_url(url)),
        option,
        "cafile" if amqp_off else "ssl_ca_certs",
    )
    return True


def without_query(url: str) -> str:
    """`url` without its query (TLS options: file names, a key's password) nor fragment."""
    return url.split("?", 1)[0].split("#", 1)[0]


def check_tls_files(url: str, options: Sequence[str], variable: str) -> None:
    """Fail before connecting when a TLS option of `url`'s query names a missing file.

    Raises:
        ConfigError: naming the variable, the host (password masked), the option and path.
    """
    query = parse_qs(urlsplit(url).query)
    for option in options:
        for path in query.get(option, []):
            folder = option.endswith("path")
            if not (os.path.isdir(path) if folder else os.path.isfile(path)):
                kind = "folder of CA certificates" if folder else "PEM file"
                raise ConfigError(
                    f"{variable} ({without_query(mask_url(url))}): {option}={path} does not "
                    f"exist (expected a {kind} this process can read)"
                )


async def _tls_handshake_stalled(url: str, exc: BaseException, sentinels: str) -> bool:
    """A ``rediss://`` connect that timed out, to a port that accepts plain TCP at once."""
    parts = urlsplit(url)
    if parts.scheme != "rediss" or sentinels or not isinstance(exc, RedisTimeoutError):
        return False
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection(parts.hostname, parts.port or 6379), timeout=1.0
        )
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


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
        #: where a lost connection and its return are said (`watch`)
        self.outage: OutageLog | None = None
        super().__init__(self.urls[self.url_index], loop=loop, **kwargs)

    def watch(self, outage: OutageLog) -> None:
        """Report every lost connection (and failed attempt) to `outage`, and its return."""
        self.outage = outage
        self.reconnect_callbacks.add(lambda _connection: outage.back())

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        if not (self._close_called or self.is_closed):
            exc = closing.exception() if closing.done() and not closing.cancelled() else None
            if self.outage is not None:
                self.outage.lost(exc)
            if len(self.urls) > 1:
                lost = str(self)
                self.url_index = (self.url_index + 1) % len(self.urls)
                self.url = self.urls[self.url_index]
                self.failovers += 1
                logger.info("RabbitMQ node %s unavailable; next attempt: %s", lost, self)
        await super()._on_connection_close(closing)


def process_queue_id() -> str:
    """The id of a queue one process declares for itself (selector, bids, snapshot):
    ``<host>-<pid>-<random>``, so a person in the management UI sees whose it is."""
    host = re.sub(r"[^A-Za-z0-9-]+", "-", socket.gethostname())[:40].strip("-") or "host"
    return f"{host}-{os.getpid()}-{new_id()[:6]}"


class MeshConnection(Lifecycle):
    """The broker and Redis handles of one process, plus the names of its namespace."""

    def __init__(self, settings: Settings, name: str = "mesh") -> None:
        self.settings = settings
        self.name = name
        self.topology = Topology.from_settings(settings)
        self.keys = Keys(settings.namespace, vhost_of(settings))
        self._amqp: AbstractRobustConnection | None = None
        self._redis: Redis | None = None
        redis_where = settings.redis_url_masked
        if settings.redis_sentinels:
            redis_where = (
                f"master {settings.redis_sentinel_master!r} of sentinels {settings.redis_sentinels}"
            )
        #: the process's outage logs of this broker and this Redis (`mesh.outage`)
        self.outages = Outages(
            outage_log(
                "RabbitMQ",
                settings.amqp_url_masked,
                retry=f"reconnecting every {RECONNECT_INTERVAL_S}s",
            ),
            outage_log("Redis", redis_where),
        )

    @property
    def connection_name(self) -> str:
        """What the management UI shows: ``<namespace>/<role>/<host>:<pid>``, so two meshes
        and two processes of one role are told apart (a ``mesh-`` prefix is dropped)."""
        role = self.name.removeprefix("mesh-") or "mesh"
        return f"{self.settings.namespace}/{role}/{socket.gethostname()}:{os.getpid()}"

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
        """Connect to RabbitMQ and Redis.

        Raises:
            ServiceUnavailable: a service is down or unreachable (the message names it).
            ConfigError: a login, a vhost, a Redis ACL or a TLS handshake was refused, or a
                TLS option names a missing file: a setting to fix, not a service to start.
        """
        s = self.settings
        quiet_connection_noise()
        redis_url = s.redis_url.get_secret_value()
        # a TLS option naming a missing file is a setting to fix, not a service to start
        for url in (u.get_secret_value() for u in s.amqp_urls):
            warn_unverified_tls(url, "MESH_AMQP_URL")
            if urlsplit(url).scheme == "amqps":
                check_tls_files(url, AMQP_TLS_FILES, "MESH_AMQP_URL")
        warn_unverified_tls(redis_url, "MESH_REDIS_URL")
        if urlsplit(redis_url).scheme == "rediss":
            check_tls_files(redis_url, REDIS_TLS_FILES, "MESH_REDIS_URL")
        self._amqp = await self._open_amqp()
        client = redis_client(
            redis_url,
            sentinels=s.redis_sentinels,
            master=s.redis_sentinel_master,
            connect_timeout_s=s.connect_timeout_s,
        )
        where = self.outages.redis.where
        try:
            await client.ping()
        except redis_asyncio.AuthenticationError as exc:
            # WRONGPASS (a wrong password or ACL user), NOAUTH (a password is required)
            logger.debug("Redis login refused: %r", exc)
            await self._abandon(client)
            if urlsplit(redis_url).password is None:
                raise ConfigError(
                    f"Redis at {where} refused the login: it asks for a password (NOAUTH); "
                    "put the user and password in MESH_REDIS_URL "
                    "(redis://USER:PASSWORD@HOST:6379/0)"
                ) from None
            raise ConfigError(
                f"Redis at {where} refused the login: check the user and password in MESH_REDIS_URL"
            ) from None
        except NoPermissionError as exc:
            logger.debug("Redis refused PING: %r", exc)
            await self._abandon(client)
            user = urlsplit(redis_url).username or "default"
            raise ConfigError(
                f"Redis at {where} refused PING to ACL user {user!r} (NOPERM): give it "
                "+@connection or use another login in MESH_REDIS_URL"
            ) from None
        except (OSError, RedisError) as exc:
            logger.debug("Redis connect failed: %r", exc)
            await self._abandon(client)
            tls = find_tls_error(exc)
            if tls is not None:
                query = parse_qs(urlsplit(redis_url).query)
                given = (query.get("ssl_ca_certs") or query.get("ssl_ca_path") or [""])[0] or None
                raise tls_config_error(
                    "Redis",
                    where,
                    tls,
                    variable="MESH_REDIS_URL",
                    ca_option="ssl_ca_certs",
                    ca_given=given,
                    plain_fix="use redis:// or the port of its TLS listener (tls-port)",
                ) from None
            if await _tls_handshake_stalled(redis_url, exc, s.redis_sentinels):
                # a plain Redis reads a ClientHello as the start of an inline command and
                # waits for its end: the handshake times out instead of failing
                raise ConfigError(
                    f"Redis at {without_query(where)} accepted the connection but did not "
                    f"answer the TLS handshake within {s.connect_timeout_s:g} s: it does not "
                    "seem to speak TLS on that port; use redis:// or the port of its TLS "
                    "listener (tls-port) in MESH_REDIS_URL"
                ) from None
            raise ServiceUnavailable("Redis", where, start_hint("MESH_REDIS_URL")) from None
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
                client_properties={"connection_name": self.connection_name},
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
                tls = find_tls_error(exc)
                if tls is not None:
                    # a certificate, a CA or a port: the same on every node of the list
                    given = URL(url).query.get("cafile") or URL(url).query.get("capath")
                    raise tls_config_error(
                        "RabbitMQ",
                        mask_url(url),
                        tls,
                        variable="MESH_AMQP_URL",
                        ca_option="cafile",
                        ca_given=given,
                        plain_fix="use amqp:// or the port of its TLS listener (5671)",
                    ) from None
                continue
            except BaseException:  # cancelled: stop its reconnect loop too
                await asyncio.shield(connection.close())
                raise
            if index:
                logger.info(
                    "RabbitMQ: connected to %s (node %d of %d)", connection, index + 1, len(urls)
                )
            connection.watch(self.outages.broker)
            return connection
        raise ServiceUnavailable(
            "RabbitMQ", s.amqp_url_masked, start_hint("MESH_AMQP_URL")
        ) from None

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
