"""TLS: ``amqps://``, ``rediss://`` and an ``https://`` management URL, against listeners this
test starts itself with a throw-away CA (openssl CLI, in tmp_path): a TLS-terminating TCP
proxy in front of the shared broker (5672) and management API (15672), and a redis-server
of its own with a TLS port. A TLS failure is a `ConfigError` naming the host, OpenSSL's
reason and the fix, never "unreachable"; so is a refused Redis login or ACL.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import pytest
import redis.asyncio as redis_asyncio

from mesh.config import Settings
from mesh.connection import FailoverConnection, connect
from mesh.errors import ConfigError, ServiceUnavailable
from mesh.management import Management
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

BROKER_PORT = 5672
MANAGEMENT_PORT = 15672
#: a password that must never show in a message
SECRET = "sekret-tls"


@dataclass(frozen=True)
class Certs:
    ca: Path
    #: signed by `ca` for 127.0.0.1 and localhost
    cert: Path
    key: Path
    #: signed by `ca` for another name only (a host name mismatch on 127.0.0.1)
    other_cert: Path
    other_key: Path
    #: a second CA that signed nothing here
    stranger_ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _make_ca(folder: Path, name: str) -> None:
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        *("-nodes", "-days", "2", "-subj", f"/CN=mesh test {name}"),
        *("-keyout", f"{name}.key", "-out", f"{name}.pem"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=folder,
    )


def _make_server_cert(folder: Path, name: str, alt_names: str) -> None:
    ext = folder / f"{name}.ext"
    ext.write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
        f"subjectAltName={alt_names}\n"
        "subjectKeyIdentifier=hash\n"
        "authorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        *("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-subj", f"/CN={name}", "-keyout", f"{name}.key", "-out", f"{name}.csr"),
        cwd=folder,
    )
    _openssl(
        *("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-set_serial", str(abs(hash(name)) % 10**9), "-days", "2"),
        *("-extfile", ext.name, "-out", f"{name}.pem"),
        cwd=folder,
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed: it makes the throw-away certificates")
    folder = tmp_path_factory.mktemp("tls")
    _make_ca(folder, "ca")
    _make_ca(folder, "stranger")
    _make_server_cert(folder, "server", "IP:127.0.0.1,DNS:localhost")
    _make_server_cert(folder, "other", "DNS:other.invalid")
    return Certs(
        ca=folder / "ca.pem",
        cert=folder / "server.pem",
        key=folder / "server.key",
        other_cert=folder / "other.pem",
        other_key=folder / "other.key",
        stranger_ca=folder / "stranger.pem",
    )


class TlsProxy:
    """TLS on 127.0.0.1:<port>, relayed in plain TCP to 127.0.0.1:`upstream`."""

    def __init__(self, upstream: int, cert: Path, key: Path) -> None:
        self.upstream = upstream
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.load_cert_chain(cert, key)
        self.server: asyncio.Server | None = None
        self.port = 0
        self.relayed = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[Any]] = set()

    async def start(self) -> TlsProxy:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.context)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream)
            self._writers.add(up_writer)
            self.relayed += 1

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                with contextlib.suppress(OSError):
                    while data := await src.read(65536):
                        dst.write(data)
                        await dst.drain()
                dst.close()

            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except OSError:
            writer.close()
        finally:
            self._tasks.discard(task)

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        await self.server.wait_closed()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@pytest.fixture
async def proxies() -> AsyncIterator[list[TlsProxy]]:
    """Append started proxies; every one is closed at teardown."""
    started: list[TlsProxy] = []
    yield started
    for proxy in started:
        await proxy.close()


async def _proxy(proxies: list[TlsProxy], upstream: int, cert: Path, key: Path) -> TlsProxy:
    proxy = await TlsProxy(upstream, cert, key).start()
    proxies.append(proxy)
    return proxy


def _with(settings: Settings, **overrides: Any) -> Settings:
    """`settings` with other values, validated like the environment's."""
    values: dict[str, Any] = {"namespace": settings.namespace, "connect_timeout_s": 3.0}
    return Settings.from_env({}, **{**values, **overrides})


def _assert_tls_error(message: str, *fragments: str) -> None:
    assert "failed the TLS handshake" in message, message
    assert "unreachable" not in message, message
    assert SECRET not in message and "******" in message, message
    for fragment in fragments:
        assert fragment in message, message


# --- amqps:// ------------------------------------------------------------------------------
async def test_amqps_with_the_ca_round_trips_a_message(
    settings: Settings, certs: Certs, proxies: list[TlsProxy], add_cleanup: Any
) -> None:
    proxy = await _proxy(proxies, BROKER_PORT, certs.cert, certs.key)
    s = _with(settings, amqp_url=f"amqps://guest:guest@127.0.0.1:{proxy.port}/?cafile={certs.ca}")
    conn = await connect(s, name="tls-amqp")
    add_cleanup(conn.close)
    assert isinstance(conn.amqp, FailoverConnection)
    assert conn.amqp.url.scheme == "amqps" and proxy.relayed == 1
    channel = await conn.channel()
    queue = await channel.declare_queue(f"{s.namespace}.tls", exclusive=True)
    await channel.default_exchange.publish(aio_pika.Message(b"over tls"), routing_key=queue.name)
    message = await wait_until(lambda: queue.get(no_ack=True, fail=False))
    assert message.body == b"over tls"


async def test_amqps_without_the_ca_is_a_tls_config_error(
    settings: Settings, certs: Certs, proxies: list[TlsProxy]
) -> None:
    proxy = await _proxy(proxies, BROKER_PORT, certs.cert, certs.key)
    s = _with(settings, amqp_url=f"amqps://guest:{SECRET}@127.0.0.1:{proxy.port}/")
    with pytest.raises(ConfigError) as info:
        await connect(s, name="tls-no-ca")
    _assert_tls_error(
        str(info.value),
        f"RabbitMQ at amqps://guest:******@127.0.0.1:{proxy.port}/",
        "certificate verify failed",
        "set cafile=/path/ca.pem in MESH_AMQP_URL's query",
    )
    assert proxy.relayed == 0


async def test_amqps_with_another_ca_names_the_cafile(
    settings: Settings, certs: Certs, proxies: list[TlsProxy]
) -> None:
    proxy = await _proxy(proxies, BROKER_PORT, certs.cert, certs.key)
    url = f"amqps://guest:{SECRET}@127.0.0.1:{proxy.port}/?cafile={certs.stranger_ca}"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, amqp_url=url), name="tls-wrong-ca")
    _assert_tls_error(str(info.value), f"{certs.stranger_ca} does not hold the CA")


async def test_amqps_to_a_name_the_certificate_does_not_hold(
    settings: Settings, certs: Certs, proxies: list[TlsProxy]
) -> None:
    proxy = await _proxy(proxies, BROKER_PORT, certs.other_cert, certs.other_key)
    url = f"amqps://guest:{SECRET}@127.0.0.1:{proxy.port}/?cafile={certs.ca}"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, amqp_url=url), name="tls-wrong-name")
    _assert_tls_error(str(info.value), "mismatch", "subjectAltName")


async def test_amqps_to_the_plain_port_says_it_does_not_speak_tls(
    settings: Settings, certs: Certs
) -> None:
    url = f"amqps://guest:{SECRET}@127.0.0.1:{BROKER_PORT}/?cafile={certs.ca}"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, amqp_url=url), name="tls-plain-port")
    _assert_tls_error(str(info.value), "does not speak TLS on that port", "amqp://")


async def test_a_tls_failure_on_one_of_several_nodes_stops_at_once(
    settings: Settings, certs: Certs, proxies: list[TlsProxy]
) -> None:
    """Every node of a cluster has the same CA and options: the next would fail alike."""
    proxy = await _proxy(proxies, BROKER_PORT, certs.cert, certs.key)
    urls = f"amqps://guest:{SECRET}@127.0.0.1:{proxy.port}/,amqp://guest:guest@127.0.0.1:5672/"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, amqp_url=urls), name="tls-several")
    _assert_tls_error(str(info.value), f"127.0.0.1:{proxy.port}")


async def test_a_missing_cafile_is_reported_before_connecting(
    settings: Settings, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.pem"
    url = f"amqps://guest:{SECRET}@127.0.0.1:5671/?cafile={missing}"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, amqp_url=url), name="tls-missing-ca")
    message = str(info.value)
    assert f"cafile={missing}" in message and "does not exist" in message, message
    assert SECRET not in message


# --- https:// management API --------------------------------------------------------------
async def test_management_over_https_with_the_ca_file(
    settings: Settings, certs: Certs, proxies: list[TlsProxy]
) -> None:
    proxy = await _proxy(proxies, MANAGEMENT_PORT, certs.cert, certs.key)
    s = _with(
        settings,
        management_url=f"https://guest:guest@127.0.0.1:{proxy.port}/",
        management_ca_file=str(certs.ca),
    )
    queues = await asyncio.to_thread(Management(s).queues)
    assert isinstance(queues, list) and proxy.relayed >= 1


async def test_management_over_https_without_the_ca_is_a_tls_config_error(
    settings: Settings, certs: Certs, proxies: list[TlsProxy]
) -> None:
    proxy = await _proxy(proxies, MANAGEMENT_PORT, certs.cert, certs.key)
    s = _with(settings, management_url=f"https://guest:{SECRET}@127.0.0.1:{proxy.port}/")
    with pytest.raises(ConfigError) as info:
        await asyncio.to_thread(Management(s).queues)
    _assert_tls_error(
        str(info.value),
        f"management API at https://guest:******@127.0.0.1:{proxy.port}/",
        "certificate verify failed",
        "MESH_MANAGEMENT_CA_FILE=/path/ca.pem",
    )


async def test_management_https_to_the_plain_port(settings: Settings, certs: Certs) -> None:
    s = _with(
        settings,
        management_url=f"https://guest:{SECRET}@127.0.0.1:{MANAGEMENT_PORT}/",
        management_ca_file=str(certs.ca),
    )
    with pytest.raises(ConfigError) as info:
        await asyncio.to_thread(Management(s).queues)
    _assert_tls_error(str(info.value), "does not speak TLS on that port", "http://")


# --- rediss:// -----------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


@dataclass
class RedisServer:
    process: subprocess.Popen[bytes]
    port: int


def _start_redis(folder: Path, *args: str) -> RedisServer:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    port = _free_port()
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)]
        + [arg.replace("{port}", str(port)) for arg in args],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return RedisServer(process, port)


def _stop(server: RedisServer) -> None:
    if server.process.poll() is None:
        server.process.kill()
    server.process.wait()


async def _answers(url: str) -> bool:
    """True once the server at `url` answers (any reply, a refusal included)."""
    client = redis_asyncio.Redis.from_url(url, socket_connect_timeout=1)
    try:
        await client.ping()
    except redis_asyncio.AuthenticationError:
        return True
    except (OSError, redis_asyncio.RedisError):
        return False
    finally:
        await client.aclose()
    return True


@pytest.fixture
async def tls_redis(tmp_path: Path, certs: Certs) -> AsyncIterator[RedisServer]:
    """A redis-server with only a TLS port (no client certificates asked)."""
    server = _start_redis(
        tmp_path,
        *("--port", "0", "--tls-port", "{port}", "--tls-auth-clients", "no"),
        *("--tls-cert-file", str(certs.cert), "--tls-key-file", str(certs.key)),
        *("--tls-ca-cert-file", str(certs.ca)),
    )
    try:
        url = f"rediss://127.0.0.1:{server.port}/0?ssl_ca_certs={certs.ca}"
        await wait_until(lambda: _answers(url), timeout=10, interval=0.05)
        yield server
    finally:
        _stop(server)


@pytest.fixture
async def password_redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A plain redis-server whose default user needs a password (`SECRET`)."""
    server = _start_redis(tmp_path, "--port", "{port}", "--requirepass", SECRET)
    try:
        await wait_until(
            lambda: _answers(f"redis://127.0.0.1:{server.port}/0"), timeout=10, interval=0.05
        )
        yield server
    finally:
        _stop(server)


async def test_rediss_with_the_ca_works_with_amqps(
    settings: Settings,
    certs: Certs,
    tls_redis: RedisServer,
    proxies: list[TlsProxy],
    add_cleanup: Any,
) -> None:
    proxy = await _proxy(proxies, BROKER_PORT, certs.cert, certs.key)
    s = _with(
        settings,
        amqp_url=f"amqps://guest:guest@localhost:{proxy.port}/?cafile={certs.ca}",
        redis_url=f"rediss://127.0.0.1:{tls_redis.port}/0?ssl_ca_certs={certs.ca}",
    )
    conn = await connect(s, name="tls-redis")
    add_cleanup(conn.close)
    key = f"{s.namespace}:tls"
    await conn.redis.set(key, "over tls", ex=60)
    assert await conn.redis.get(key) == b"over tls"
    assert proxy.relayed == 1


async def test_rediss_without_the_ca_is_a_tls_config_error(
    settings: Settings, tls_redis: RedisServer
) -> None:
    s = _with(settings, redis_url=f"rediss://:{SECRET}@127.0.0.1:{tls_redis.port}/0")
    with pytest.raises(ConfigError) as info:
        await connect(s, name="tls-redis-no-ca")
    _assert_tls_error(
        str(info.value),
        f"Redis at rediss://:******@127.0.0.1:{tls_redis.port}/0",
        "certificate verify failed",
        "set ssl_ca_certs=/path/ca.pem in MESH_REDIS_URL's query",
    )


async def test_rediss_with_another_ca_names_it(
    settings: Settings, certs: Certs, tls_redis: RedisServer
) -> None:
    url = f"rediss://:{SECRET}@127.0.0.1:{tls_redis.port}/0?ssl_ca_certs={certs.stranger_ca}"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, redis_url=url), name="tls-redis-wrong-ca")
    _assert_tls_error(str(info.value), f"{certs.stranger_ca} does not hold the CA")


async def test_a_missing_ssl_ca_certs_is_reported_before_connecting(
    settings: Settings, tmp_path: Path
) -> None:
    missing = tmp_path / "nope.pem"
    url = f"rediss://:{SECRET}@127.0.0.1:6380/0?ssl_ca_certs={missing}"
    with pytest.raises(ConfigError) as info:
        await connect(_with(settings, redis_url=url), name="tls-redis-missing-ca")
    message = str(info.value)
    assert f"ssl_ca_certs={missing}" in message and "MESH_REDIS_URL" in message, message
    assert SECRET not in message


async def test_plain_redis_on_the_tls_port_stays_unreachable(
    settings: Settings, tls_redis: RedisServer
) -> None:
    """The TLS server only closes the connection: nothing tells it from a dead proxy."""
    s = _with(settings, redis_url=f"redis://127.0.0.1:{tls_redis.port}/0")
    with pytest.raises(ServiceUnavailable):
        await connect(s, name="tls-redis-plain")


async def test_rediss_to_a_plain_port_says_it_does_not_speak_tls(
    settings: Settings, certs: Certs, password_redis: RedisServer
) -> None:
    """A plain Redis waits for the end of the 'command' a ClientHello starts: a timeout."""
    url = f"rediss://:{SECRET}@127.0.0.1:{password_redis.port}/0?ssl_ca_certs={certs.ca}"
    s = _with(settings, redis_url=url, connect_timeout_s=1.0)
    with pytest.raises(ConfigError) as info:
        await connect(s, name="tls-redis-plain-port")
    message = str(info.value)
    assert "did not answer the TLS handshake within 1 s" in message, message
    assert "use redis://" in message and SECRET not in message and "?" not in message


@pytest.mark.parametrize("auth", [":wrong-password@", ""], ids=["WRONGPASS", "NOAUTH"])
async def test_a_refused_redis_login_is_a_login_error(
    settings: Settings, password_redis: RedisServer, auth: str
) -> None:
    s = _with(settings, redis_url=f"redis://{auth}127.0.0.1:{password_redis.port}/0")
    with pytest.raises(ConfigError) as info:
        await connect(s, name="redis-login")
    message = str(info.value)
    assert "refused the login" in message and "MESH_REDIS_URL" in message, message
    assert "wrong-password" not in message and "unreachable" not in message


async def test_a_redis_acl_without_ping_is_a_permission_error(
    settings: Settings, password_redis: RedisServer
) -> None:
    admin = redis_asyncio.Redis(port=password_redis.port, password=SECRET)
    try:
        await admin.acl_setuser(
            "nothing", enabled=True, passwords=[f"+{SECRET}"], categories=["-@all"]
        )
    finally:
        await admin.aclose()
    s = _with(settings, redis_url=f"redis://nothing:{SECRET}@127.0.0.1:{password_redis.port}/0")
    with pytest.raises(ConfigError) as info:
        await connect(s, name="redis-noperm")
    message = str(info.value)
    assert "NOPERM" in message and "'nothing'" in message and SECRET not in message, message
