"""Under access control a router takes a task in and a worker's Result out in one Redis step
each: the submission seeds the first dispatch in the agent's view (`TaskStore.submit` with
``seed_until``), and a result notice is believed, the mesh's record finished and the
waiters read in one function (`TaskStore.relay`), for many notices in one round trip
(`mesh.functions.CallBatch`). Each answer of the relay, against a real Redis."""

from __future__ import annotations

import asyncio

import pytest

from mesh.connection import MeshConnection
from mesh.dispatch.store import Holder, TaskStore
from mesh.functions import CallBatch
from mesh.schemas import Result, TaskEnvelope, encode, now_ms

pytestmark = pytest.mark.integration

FAR = 9_999_999_999_999


def _store(conn: MeshConnection) -> TaskStore:
    return TaskStore(
        conn.redis, conn.keys, conn.settings.model_copy(update={"access_control": True})
    )


async def _dispatched(store: TaskStore, agent: str = "a", waiter: str = "reply.q") -> str:
    envelope = TaskEnvelope(capability="pay", target=agent, reply_to=waiter)
    sub = await store.submit(
        envelope,
        redelivered=False,
        states=("submitted", "routing", "dispatched"),
        by="router",
        agent_id=agent,
        seed_until=FAR,
    )
    assert sub.status == "new" and sub.seeded
    return envelope.task_id


async def _seal(conn: MeshConnection, agent: str, task_id: str, body: bytes) -> None:
    await conn.redis.set(conn.keys.sealed(agent, task_id), body)


async def test_a_submission_seeds_its_first_dispatch_in_the_same_step(
    conn: MeshConnection,
) -> None:
    store, k = _store(conn), conn.keys
    task_id = await _dispatched(store)
    assert await store.dispatched_agents(task_id) == {"a"}
    view = await conn.redis.hgetall(k.for_agent("a").task(task_id))
    assert view[b"state"] == b"dispatched" and view[b"trace_id"]
    assert await conn.redis.zscore(k.processing(), k.task(task_id)) == FAR
    # a duplicate seeds nothing, nor does a task no agent was chosen for
    again = TaskEnvelope(task_id=task_id, capability="pay", target="b", reply_to="reply.q2")
    sub = await store.submit(
        again, redelivered=False, states=("submitted",), by="router", agent_id="b", seed_until=1
    )
    assert sub.status == "pending" and not sub.seeded
    assert await store.dispatched_agents(task_id) == {"a"}
    lone = TaskEnvelope(capability="pay")
    sub = await store.submit(lone, redelivered=False, states=("submitted",), by="r", seed_until=1)
    assert sub.status == "new" and not sub.seeded
    assert await store.dispatched_agents(lone.task_id) == set()


async def test_a_relay_believes_only_the_dispatched_agents_terminal_copy_of_the_very_task(
    conn: MeshConnection,
) -> None:
    store, k = _store(conn), conn.keys
    task_id = await _dispatched(store)
    assert (await store.relay(task_id, "b", by="router")).status == "foreign"
    assert (await store.relay(task_id, "b", by="router")).detail == "a"
    assert (await store.relay(task_id, "a", by="router")).status == "unsealed"
    other = Result(task_id="another-task", status="completed", output={"paid": 10**6})
    interim = Result(task_id=task_id, status="queued_for_human")
    for bad in (encode(other), encode(interim), b"not json", b"[1, 2]"):
        await _seal(conn, "a", task_id, bad)
        assert (await store.relay(task_id, "a", by="router")).status == "invalid", bad
    assert await store.stored_result(task_id) is None

    sealed = encode(Result(task_id=task_id, status="completed", output={"n": 1}, instance_id="i1"))
    await _seal(conn, "a", task_id, sealed)
    relay = await store.relay(task_id, "a", by="router")
    assert relay.status == "ok" and relay.body == sealed and relay.waiters == ("reply.q",)
    assert await conn.redis.hget(k.idem(task_id), "result") == sealed
    assert (await store.state(task_id))["state"] == "completed"
    assert await conn.redis.zscore(k.processing(), k.task(task_id)) is None
    # quiet: the steps are in the agent's view, the mesh's record has its own only
    rows = await conn.redis.lrange(k.task_history(task_id), 0, -1)
    assert len(rows) == 3
    # a redelivered notice before the callers were told answers them again, then not
    again = await store.relay(task_id, "a", by="router")
    assert again.status == "again" and again.body == sealed and again.waiters == ("reply.q",)
    await store.mark_replied(task_id)
    done = await store.relay(task_id, "a", by="router")
    assert done.status == "done" and done.detail == "completed"


async def test_a_task_the_mesh_ended_first_keeps_its_answer(conn: MeshConnection) -> None:
    store = _store(conn)
    task_id = await _dispatched(store)
    reaped = Result(task_id=task_id, status="failed")
    assert (await store.finish(reaped, "failed", by="reaper")).status == "ok"
    late = Result(task_id=task_id, status="completed", instance_id="i1")
    await _seal(conn, "a", task_id, encode(late))
    relay = await store.relay(task_id, "a", by="router")
    assert relay.status == "done" and relay.detail == "failed" and relay.waiters == ()
    assert (await store.stored_result(task_id)) == reaped


async def test_a_record_that_cannot_end_from_its_state_is_refused(conn: MeshConnection) -> None:
    store = _store(conn)
    envelope = TaskEnvelope(capability="pay", reply_to="reply.q")
    await store.submit(envelope, redelivered=False, states=("submitted", "routing"), by="r")
    await store.seed(envelope, "a", FAR)
    sealed = Result(task_id=envelope.task_id, status="completed", instance_id="i1")
    await _seal(conn, "a", envelope.task_id, encode(sealed))
    relay = await store.relay(envelope.task_id, "a", by="router")
    assert relay.status == "refused" and relay.detail == "routing"
    assert await store.stored_result(envelope.task_id) is None


async def test_notices_taken_together_are_relayed_in_one_round_trip(
    conn: MeshConnection,
) -> None:
    store = _store(conn)
    ids = [await _dispatched(store) for _ in range(4)]
    for task_id in ids:
        done = Result(task_id=task_id, status="completed", instance_id="i1")
        await _seal(conn, "a", task_id, encode(done))
    batch = CallBatch.of(store.redis)
    before = (batch.batches, batch.calls)
    answers = await asyncio.gather(
        *(store.relay(task_id, "a", by="router") for task_id in ids),
        store.relay(ids[0], "b", by="router"),
    )
    assert [a.status for a in answers] == ["ok", "ok", "ok", "ok", "foreign"]
    assert (batch.batches, batch.calls) == (before[0] + 1, before[1] + 5)
    # one at a time, each goes at once (the dispatch before it is batched calls too)
    later = await _dispatched(store)
    await _seal(conn, "a", later, encode(Result(task_id=later, status="failed")))
    mid = (batch.batches, batch.calls)
    assert (await store.relay(later, "a", by="router")).status == "ok"
    assert (batch.batches, batch.calls) == (mid[0] + 1, mid[1] + 1)


async def test_a_workers_commit_in_its_view_is_what_the_relay_forwards(
    conn: MeshConnection,
) -> None:
    """The worker's side as it runs: claim and commit in the agent's view with the seal
    (fencing off: no lease here), then the router's relay forwards that copy."""
    store = _store(conn)
    task_id = await _dispatched(store)
    envelope = TaskEnvelope(task_id=task_id, capability="pay")
    view = TaskStore(
        conn.redis,
        conn.keys.for_agent("a"),
        conn.settings.model_copy(update={"access_control": True}),
        instances=conn.keys,
    )
    holder = Holder("a-1", 1, fenced=False)
    claim = await view.claim(
        envelope, holder, agent_id="a", redelivered=False, lifetime_end_ms=now_ms() + 60_000
    )
    assert claim.status == "claimed"
    result = Result(task_id=task_id, status="completed", output={"n": 2}, instance_id="a-1")
    commit = await view.finish(
        result, "completed", by="a-1", holder=holder, agent_id="a", with_waiters=False, seal=True
    )
    assert commit.status == "ok"
    relay = await store.relay(task_id, "a", by="router")
    assert relay.status == "ok" and relay.body == encode(result)
    assert relay.waiters == ("reply.q",)
