"""Shared by the tests of `mesh access provision`'s lockdown (operator, guest, `default`).

The suite and everyone else use guest/guest and Redis' passwordless `default` user on the
shared broker and Redis, so these tests never switch those off: the Redis half runs
against a throw-away ``redis-server`` (`throwaway_redis`), the broker half against a
throw-away administrator standing in for guest (`stand_in_guest`). The code path is the
one the command runs; only the names differ.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import redis
import redis.asyncio as redis_asyncio

from mesh.management import Management


def operator_name() -> str:
    """A unique operator login name (global on the broker: never the default one)."""
    return f"test-operator-{uuid.uuid4().hex[:10]}"


async def drop_operator(management: Management, name: str, redis_url: str = "") -> None:
    """Delete the operator's broker user, and its Redis ACL user at `redis_url` (if any)."""
    await asyncio.to_thread(management.delete_user, name)
    if redis_url:
        client = redis_asyncio.Redis.from_url(redis_url)
        try:
            await client.acl_deluser(name)
        finally:
            await client.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def throwaway_redis(deadline_s: float = 10.0) -> Iterator[str]:
    """A private ``redis-server`` on a free port (no persistence); its URL (no login)."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is not installed"
    port = _free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        end = time.monotonic() + deadline_s
        while True:
            try:
                with redis.Redis.from_url(url, socket_connect_timeout=0.5) as client:
                    client.ping()
                break
            except redis.ConnectionError:
                assert process.poll() is None, "redis-server exited"
                assert time.monotonic() < end, "redis-server did not answer in time"
                time.sleep(0.05)  # polling a starting process: nothing to wait on
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@asynccontextmanager
async def stand_in_guest(management: Management) -> AsyncIterator[tuple[str, str]]:
    """A broker administrator with a password, as guest is: (name, password); deleted at the
    end."""
    name, password = f"test-guest-{uuid.uuid4().hex[:10]}", uuid.uuid4().hex
    await asyncio.to_thread(management.put_user, name, password, ("administrator",))
    try:
        yield name, password
    finally:
        await asyncio.to_thread(management.delete_user, name)
