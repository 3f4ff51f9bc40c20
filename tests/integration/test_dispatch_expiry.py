"""The task records' expiry: every key a task's steps write expires; the steps of one task
a moment apart set the expiry once (``expires_ms``), a step past the slack sets it again,
and a history list a step creates gets its own."""

from __future__ import annotations

import pytest

from mesh.connection import MeshConnection
from mesh.dispatch.lua import EXPIRY_SLACK
from mesh.dispatch.store import Holder, TaskStore
from mesh.schemas import Result, TaskEnvelope, now_ms

pytestmark = pytest.mark.integration

ROUTE = ("submitted", "routing", "dispatched")


async def _expires(conn: MeshConnection, key: str) -> int:
    return int(await conn.redis.hget(key, "expires_ms") or 0)


async def test_one_tasks_steps_set_each_expiry_once_and_leave_no_key_without_one(
    conn: MeshConnection,
) -> None:
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    k = conn.keys
    envelope = TaskEnvelope(capability="x", reply_to="reply.q")
    task_id = envelope.task_id
    sub = await store.submit(envelope, redelivered=False, states=ROUTE, by="r", agent_id="a")
    set_at_submit = await _expires(conn, k.task(task_id))
    assert sub.status == "new" and set_at_submit > now_ms()
    holder = Holder("w-1", 1, fenced=False)
    claim = await store.claim(
        envelope,
        holder,
        agent_id="a",
        redelivered=False,
        lifetime_end_ms=now_ms() + 60_000,
        count_visit=True,
        pristine=True,
    )
    claimed = await _expires(conn, k.idem(task_id))
    result = Result(task_id=task_id, trace_id=envelope.trace_id, status="completed")
    commit = await store.finish(result, "completed", by="w-1", holder=holder, agent_id="a")
    assert (claim.status, commit.status) == ("claimed", "ok")
    # set by the submission and by the claim, not again by the steps that followed
    assert await _expires(conn, k.task(task_id)) == set_at_submit
    assert await _expires(conn, k.idem(task_id)) == claimed
    ttl_ms = conn.settings.idempotency_ttl_s * 1000
    for key in (
        k.task(task_id),
        k.task_history(task_id),
        k.idem(task_id),
        k.task_waiters(task_id),
        k.trace_visits(envelope.trace_id),
    ):
        left = await conn.redis.pttl(key)
        assert ttl_ms * (1 - EXPIRY_SLACK) < left <= ttl_ms, key
    assert len(await store.history(task_id)) == 6


async def test_a_step_past_the_slack_sets_the_expiry_again(conn: MeshConnection) -> None:
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    k = conn.keys
    envelope = TaskEnvelope(capability="x")
    task_id = envelope.task_id
    await store.submit(envelope, redelivered=False, states=ROUTE[:2], by="r")
    ttl_ms = conn.settings.idempotency_ttl_s * 1000
    # as if the last refresh was 2 % of the TTL ago
    lagging = now_ms() + ttl_ms - int(ttl_ms * 2 * EXPIRY_SLACK)
    await conn.redis.hset(k.task(task_id), "expires_ms", lagging)
    for key in (k.task(task_id), k.task_history(task_id)):
        await conn.redis.pexpireat(key, lagging)
    assert await store.advance(task_id, "dispatched", by="r", agent_id="a") == ["dispatched"]
    assert await _expires(conn, k.task(task_id)) > lagging
    for key in (k.task(task_id), k.task_history(task_id)):
        assert await conn.redis.pttl(key) > ttl_ms * (1 - EXPIRY_SLACK), key


async def test_a_history_list_a_step_creates_expires_though_the_hash_needs_no_refresh(
    conn: MeshConnection,
) -> None:
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    k = conn.keys
    envelope = TaskEnvelope(capability="x")
    task_id = envelope.task_id
    await store.submit(envelope, redelivered=False, states=ROUTE[:2], by="r")
    set_at_submit = await _expires(conn, k.task(task_id))
    await conn.redis.delete(k.task_history(task_id))
    assert await store.advance(task_id, "dispatched", by="r", agent_id="a") == ["dispatched"]
    assert await _expires(conn, k.task(task_id)) == set_at_submit
    assert await conn.redis.pttl(k.task_history(task_id)) > 0
