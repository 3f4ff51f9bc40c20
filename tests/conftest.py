"""Shared fixtures: unique names, cleanup, spawned tasks, and waiting on facts."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest

from mesh.access.roles import Role
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.management import Management
from tests import SCAN_COUNT, access_mode

Cleanup = Callable[[Callable[[], Any]], None]

#: how long a test waits for a router to see a started agent as routable (a deadline, not a
#: pause: on loaded CI cores a router's sync of an agent, its texts embedded, took over 15 s)
ROUTABLE_S = 60.0


async def wait_until(
    predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02
) -> Any:
    """Poll `predicate` (sync or async) until it is truthy; fail after `timeout` seconds."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        value = predicate()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() >= end:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        await asyncio.sleep(interval)


class Count:
    n = 0


@contextlib.contextmanager
def pipelines_counted(redis: Any) -> Iterator[Count]:
    """Counts the pipelines the Redis client `redis` opens inside the block."""
    count, pipeline = Count(), redis.pipeline

    def counted(*args: Any, **kwargs: Any) -> Any:
        count.n += 1
        return pipeline(*args, **kwargs)

    redis.pipeline = counted
    try:
        yield count
    finally:
        del redis.pipeline


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In the access-control mode, skip what only means something without it."""
    if not access_mode.ENABLED:
        return
    for item in items:
        marker = item.get_closest_marker("access_off")
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"access control on: {marker.args[0]}"))


@pytest.fixture
def unique_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    def make(prefix: str = "t") -> str:
        return f"{prefix}{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture
def namespace() -> str:
    """A namespace no other test uses: every exchange, queue and Redis key lives under it."""
    return f"test.{uuid.uuid4().hex[:12]}"


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5)


@pytest.fixture
async def add_cleanup() -> AsyncIterator[Cleanup]:
    """Register callables (sync or async) run in reverse order at teardown."""
    stack: list[Callable[[], Any]] = []
    yield stack.append
    errors = []
    for fn in reversed(stack):
        try:
            value = fn()
            if inspect.isawaitable(value):
                await value
        except Exception as exc:  # keep unwinding; report at the end
            errors.append(exc)
    if errors:
        raise errors[0]


@pytest.fixture
async def spawn() -> AsyncIterator[Callable[[Awaitable[Any]], asyncio.Task[Any]]]:
    """Start background tasks that are cancelled at teardown; real errors are re-raised."""
    tasks: list[asyncio.Task[Any]] = []

    def start(coro: Awaitable[Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(coro)
        tasks.append(task)
        return task

    yield start
    for task in tasks:
        task.cancel()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, asyncio.CancelledError):
            raise result


@pytest.fixture
async def mesh_env(
    settings: Settings, request: pytest.FixtureRequest
) -> AsyncIterator[Callable[..., Awaitable[MeshConnection]]]:
    """Open connections named after the test; at teardown delete the namespace everywhere.

    In the access-control mode (`tests.access_mode`) they log in as the namespace's admin.
    """
    opened: list[MeshConnection] = []
    mode = await access_mode.AccessMode.start(settings) if access_mode.ENABLED else None
    if mode is not None:
        access_mode.register(mode)

    async def open_conn(name: str = "") -> MeshConnection:
        label = f"{request.node.nodeid}{name}"
        if mode is not None:
            conn = await mode.open(Role("admin"), label)
        else:
            conn = await connect(settings, name=label)
        opened.append(conn)
        return conn

    yield open_conn
    for conn in reversed(opened):
        await conn.close()
    if mode is None:
        await purge(settings)
    else:
        access_mode.unregister(mode)
        await mode.close()


async def purge(settings: Settings) -> None:
    """Delete a namespace everywhere: its exchanges and queues, and its Redis keys."""
    await asyncio.to_thread(Management(settings).purge_namespace, settings.namespace)
    cleaner = await connect(settings, name="cleanup")
    try:
        pattern = cleaner.keys.pattern()
        keys = [k async for k in cleaner.redis.scan_iter(match=pattern, count=SCAN_COUNT)]
        if keys:
            await cleaner.redis.delete(*keys)
    finally:
        await cleaner.close()


@pytest.fixture
async def conn(
    mesh_env: Callable[..., Awaitable[MeshConnection]],
) -> MeshConnection:
    return await mesh_env()


@pytest.fixture
def management(settings: Settings) -> Iterator[Management]:
    yield Management(settings)
