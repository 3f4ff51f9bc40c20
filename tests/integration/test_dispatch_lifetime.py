"""Nothing stays `processing` forever: the worker cancels at the lifetime, the reaper
fails orphans whose holder is gone."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.dispatch.reaper import Reaper
from mesh.dispatch.store import Holder, TaskStore
from mesh.messaging import Publisher
from mesh.schemas import Result, TaskEnvelope, decode, now_ms
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import start_router, start_worker, wait_for_messages

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.2, lease_ttl_s=0.5, max_task_lifetime_s=0.5
    )


async def test_worker_cancels_a_handler_at_the_maximum_lifetime(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        result = await client.request("hang", {"sleep_s": 30}, target="effect", wait_s=10)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "lifetime_exceeded"


@pytest.mark.access_off(
    "a server-named reply queue; with it on a caller replies into a queue of its own user"
)
async def test_reaper_fails_an_orphan_and_answers_its_callers(
    conn: MeshConnection, settings: Settings, add_cleanup: Any
) -> None:
    store = TaskStore(conn.redis, conn.keys, settings)
    publisher = Publisher(conn)
    await publisher.start()
    add_cleanup(publisher.close)
    await conn.topology.declare(publisher.channel)
    channel = await conn.channel()
    reply = await channel.declare_queue(exclusive=True)
    envelope = TaskEnvelope(capability="lost", reply_to=reply.name)
    assert (
        await store.submit(envelope, redelivered=False, states=("submitted", "routing"), by="test")
    ).status == "new"
    await store.advance(envelope.task_id, "dispatched", by="test")
    # claimed by an instance that has no lease (it died), lifetime already over
    ghost = Holder("ghost-1", 7, fenced=True)
    await conn.redis.hset(
        conn.keys.instance("ghost-1"),
        mapping={
            "agent_id": "x",
            "token": 7,
            "status": "up",
            "lease_expires_ms": now_ms() + 60_000,
        },
    )
    claim = await store.claim(
        envelope, ghost, agent_id="x", redelivered=False, lifetime_end_ms=now_ms() - 1
    )
    assert claim.status == "claimed"
    reaper = Reaper(store, publisher, settings.lease_ttl_s)
    assert await reaper.sweep() == []  # its lease is alive: not an orphan yet
    await conn.redis.hset(conn.keys.instance("ghost-1"), "status", "down")
    assert await reaper.sweep() == [envelope.task_id]
    assert await reaper.sweep() == []
    (answer,) = await wait_for_messages(conn, reply.name)
    result = decode(Result, answer.body)
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "lifetime_exceeded"
    assert (await store.state(envelope.task_id))["state"] == "failed"
