"""Dead letters can be listed without losing them, and replayed as new tasks."""

from __future__ import annotations

import hashlib
from typing import Any

import aio_pika
import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.dispatch.dead_letters import peek, replay
from mesh.dispatch.store import TaskStore
from mesh.messaging import Publisher
from mesh.schemas import TaskEnvelope, encode
from mesh.topology import INVALID_KEEP_BYTES, SHA256_HEADER, SIZE_HEADER, TRUNCATED_HEADER
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import drain_queue, start_router, start_worker

pytestmark = pytest.mark.integration


async def test_list_leaves_dead_letters_and_replay_runs_them_as_new_tasks(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    async with MeshClient(conn) as client:
        dead = await client.request("do", {"n": 7}, target="effect", wait_s=20)
        assert dead.status == "unroutable"  # nobody serves "effect" yet

        # the Result goes out before the dead letter: wait for the letter, then look again
        await wait_until(lambda: peek(conn, "unroutable"), timeout=5)
        for _ in range(2):  # looking twice: still there, in order
            letters = await peek(conn, "unroutable")
            assert [d.task_id for d in letters] == [dead.task_id]
        assert letters[0].details["code"] == "unknown_target"
        assert letters[0].as_dict()["body"]["payload"] == {"n": 7}

        await start_worker(conn, add_cleanup, effect_agent(conn))
        [(old, new)] = (await replay(conn, "unroutable")).done
        assert old == dead.task_id and new != old
        assert await peek(conn, "unroutable") == []

    # the replayed task ran under its new id, on the same trace
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    await wait_until(lambda: _state(store, new), timeout=10)
    state = await store.state(new)
    assert state["trace_id"] == dead.trace_id


async def _state(store: Any, task_id: str) -> bool:
    return (await store.state(task_id)).get("state") == "completed"


async def test_invalid_bodies_are_never_replayed(conn: MeshConnection) -> None:
    channel = await conn.channel()
    await conn.topology.declare(channel)
    with pytest.raises(ValueError, match="cannot be replayed"):
        await replay(conn, "invalid")
    assert await drain_queue(conn, conn.topology.dead_queue("invalid")) == []


async def test_an_invalid_body_is_kept_bounded_with_its_size_and_hash(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    garbage = b"{" + b"x" * (200 * 1024)  # 200 KiB that is not JSON, from anyone
    channel = await conn.channel()
    ingress = await channel.get_exchange(conn.topology.ingress, ensure=False)
    await ingress.publish(aio_pika.Message(garbage), routing_key=conn.topology.ingress_key)
    dead_queue = conn.topology.dead_queue("invalid")

    async def kept() -> list[Any]:
        return await drain_queue(conn, dead_queue)

    [letter] = await wait_until(kept, timeout=10)
    headers = letter.headers or {}
    assert len(letter.body) == INVALID_KEEP_BYTES and garbage.startswith(letter.body)
    assert headers[SIZE_HEADER] == len(garbage)
    assert headers[SHA256_HEADER] == hashlib.sha256(garbage).hexdigest()
    assert headers[TRUNCATED_HEADER] is True


async def test_replay_skips_and_counts_what_is_not_an_envelope(conn: MeshConnection) -> None:
    channel = await conn.channel()
    await conn.topology.declare(channel)
    await channel.close()
    publisher = Publisher(conn)
    await publisher.start()
    try:
        await publisher.dead_letter("unroutable", b"not an envelope")
        good = TaskEnvelope(capability="do", payload={"n": 1})
        await publisher.dead_letter("unroutable", encode(good), task_id=good.task_id)
    finally:
        await publisher.close()
    replayed = await replay(conn, "unroutable", limit=10)
    assert replayed.skipped == 1 and [old for old, _ in replayed.done] == [good.task_id]
    assert await peek(conn, "unroutable") == []
    [moved] = await peek(conn, "invalid")
    assert moved.body == b"not an envelope" and moved.details["replayed_from"] == "unroutable"
