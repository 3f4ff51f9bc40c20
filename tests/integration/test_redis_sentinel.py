"""Redis Sentinel: the mesh's Redis client finds the master through the sentinels and
follows a failover (a primary, a replica and one sentinel started by the test itself, on
free ports, in its own folder)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
import redis.asyncio as redis_asyncio

from mesh.config import Settings
from mesh.connection import connect
from mesh.errors import ConfigError, ServiceUnavailable
from mesh.redis_pool import parse_sentinels, redis_client
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MASTER = "meshmaster"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SentinelSet:
    primary: subprocess.Popen[bytes]
    replica: subprocess.Popen[bytes]
    sentinel: subprocess.Popen[bytes]
    ports: tuple[int, int, int]

    @property
    def sentinels(self) -> str:
        return f"127.0.0.1:{self.ports[2]}"


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    p, r, s = _free_port(), _free_port(), _free_port()
    base = [server, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    procs: list[subprocess.Popen[bytes]] = []

    def run(*args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [*args], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        procs.append(proc)
        return proc

    primary = run(*base, "--port", str(p), "--dir", str(tmp_path))
    replica = run(
        *base, "--port", str(r), "--dir", str(tmp_path), "--replicaof", "127.0.0.1", str(p)
    )
    conf = tmp_path / "sentinel.conf"
    conf.write_text(
        f"port {s}\nbind 127.0.0.1\ndir {tmp_path}\n"
        f"sentinel monitor {MASTER} 127.0.0.1 {p} 1\n"
        f"sentinel down-after-milliseconds {MASTER} 1000\n"
        f"sentinel failover-timeout {MASTER} 5000\n"
    )
    sentinel = run(server, str(conf), "--sentinel")
    try:
        _until_the_sentinel_names_the_primary(s, p)
        yield SentinelSet(primary, replica, sentinel, (p, r, s))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def _until_the_sentinel_names_the_primary(sentinel: int, primary: int, timeout: float = 20) -> None:
    """Poll until the primary answers and the sentinel names it (the processes were just
    started: on loaded cores a test connecting at once found neither listening yet)."""
    end = time.monotonic() + timeout
    while True:
        try:
            with redis.Redis(port=primary, socket_timeout=1) as up:
                up.ping()
            with redis.Redis(port=sentinel, socket_timeout=1) as watcher:
                addr = watcher.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER)
            if addr and int(addr[1]) == primary:
                return
        except redis.RedisError:
            pass
        if time.monotonic() >= end:
            raise AssertionError(
                f"sentinel :{sentinel} did not name primary :{primary} in {timeout}s"
            )
        time.sleep(0.05)


async def _replicated(port: int) -> bool:
    client = redis_asyncio.Redis(port=port)
    try:
        info = await client.info("replication")
        return bool(info.get("master_link_status") == "up")
    except OSError:
        return False
    finally:
        await client.aclose()


async def _sentinel_knows_the_replica(port: int) -> bool:
    client = redis_asyncio.Redis(port=port)
    try:
        replicas = await client.execute_command("SENTINEL", "REPLICAS", MASTER)
    except (OSError, redis_asyncio.RedisError):
        return False
    finally:
        await client.aclose()
    return bool(replicas)


async def test_the_client_follows_a_sentinel_failover(sentinel_set: SentinelSet) -> None:
    await wait_until(lambda: _replicated(sentinel_set.ports[1]), timeout=20, interval=0.1)
    # a sentinel learns of replicas from the master's INFO, every 10 s at first
    await wait_until(
        lambda: _sentinel_knows_the_replica(sentinel_set.ports[2]), timeout=30, interval=0.2
    )
    client = redis_client(
        "redis://127.0.0.1:1/0", sentinels=sentinel_set.sentinels, master=MASTER
    )  # the URL's host is not used: the sentinels name the master
    try:
        await client.set("mesh:sentinel:probe", "before")
        await client.wait(1, 2000)  # on the replica before the primary dies
        sentinel_set.primary.kill()
        sentinel_set.primary.wait()

        async def written() -> bool:
            try:
                await client.set("mesh:sentinel:after", "1")
            except (OSError, redis_asyncio.RedisError):
                return False
            return True

        await wait_until(written, timeout=30, interval=0.2)
        assert await client.get("mesh:sentinel:probe") == b"before"
        role = await client.execute_command("ROLE")
        assert role[0] == b"master"
        assert client.connection_pool.connection_kwargs.get("port") in (None, sentinel_set.ports[1])
    finally:
        await client.aclose()


async def test_a_mesh_connection_finds_redis_through_the_sentinels(
    sentinel_set: SentinelSet, namespace: str
) -> None:
    settings = Settings.from_env(
        namespace=namespace,
        redis_url="redis://127.0.0.1:1/0",  # not used for the address: the sentinels say
        redis_sentinels=sentinel_set.sentinels,
        redis_sentinel_master=MASTER,
    )
    async with await connect(settings, name="sentinel-test") as conn:
        await conn.redis.set(conn.keys.side_effect("probe"), "1")
        direct = redis_asyncio.Redis(port=sentinel_set.ports[0])
        try:
            assert await direct.get(conn.keys.side_effect("probe")) == b"1"  # on the master
        finally:
            await direct.aclose()
    wrong = settings.model_copy(update={"redis_sentinel_master": "nosuchmaster"})
    with pytest.raises(ServiceUnavailable, match="nosuchmaster"):
        await connect(wrong, name="sentinel-wrong")


def test_sentinel_addresses_are_parsed_or_refused() -> None:
    assert parse_sentinels("a:26379, [::1]:26380") == [("a", 26379), ("::1", 26380)]
    with pytest.raises(ConfigError, match="not host:port"):
        parse_sentinels("a:26379,b")
    with pytest.raises(ConfigError, match="not host:port"):
        parse_sentinels("a:0")
