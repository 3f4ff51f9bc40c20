"""A task the router ends after an instance had started it says so: the caller must not
read "never ran" when a handler may have had side effects (seen in the faults bench: an
instance killed after applying its effect, the task then `unroutable`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import connect
from mesh.dispatch.store import Holder, TaskStore
from mesh.schemas import TaskEnvelope, now_ms
from tests.conftest import purge, wait_until
from tests.integration.dispatch_kit import OrderedSelector, declare_idle_agents, start_router

pytestmark = pytest.mark.integration


async def test_an_ended_task_that_had_started_says_so(namespace: str, add_cleanup: Any) -> None:
    settings = Settings.from_env(namespace=namespace, accept_timeout_ms=800)
    conn = await connect(settings, name="started")
    add_cleanup(lambda: purge(settings))
    add_cleanup(conn.close)
    await start_router(conn, add_cleanup, OrderedSelector("gone"))
    await declare_idle_agents(conn, "gone")
    store = TaskStore(conn.redis, conn.keys, settings)
    async with MeshClient(conn) as client:
        envelope = TaskEnvelope(capability="pay", timeout_ms=20_000)
        waiting = asyncio.create_task(client.send(envelope, wait_s=15))

        async def dispatched() -> bool:
            return (await store.state(envelope.task_id)).get("state") == "dispatched"

        await wait_until(dispatched, timeout=5)
        # an instance of "gone" claims it, then dies (its copy of the dispatch expires)
        claim = await store.claim(
            envelope,
            Holder("gone-1", 1, fenced=False),
            agent_id="gone",
            redelivered=False,
            lifetime_end_ms=now_ms() + 60_000,
            pristine=True,
        )
        assert claim.status == "claimed"
        result = await waiting
    assert result.status == "unroutable" and result.error is not None
    assert "it had started on an instance (1 claim(s))" in result.error.message
    assert result.error.details.get("started") is True
