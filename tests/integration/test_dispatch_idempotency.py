"""Idempotency: duplicate submissions and redeliveries run once and share one Result;
a stale fencing token can neither commit nor apply its side effect."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.dispatch.store import Holder, ReplyMarks, TaskStore
from mesh.messaging import Publisher
from mesh.schemas import Result, TaskEnvelope, now_ms
from tests.agents_for_tests import LeaseMembership, effect_agent
from tests.conftest import pipelines_counted, wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.2, lease_ttl_s=1.0, retry_delays_ms=(200, 400)
    )


async def _count(conn: MeshConnection, name: str) -> int:
    raw = await conn.redis.get(conn.keys.side_effect(name))
    return int(raw or 0)


async def test_same_task_id_twice_runs_once_and_both_callers_get_the_same_result(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    worker = await start_worker(conn, add_cleanup, effect_agent(conn))
    envelope = TaskEnvelope(capability="do it", payload={"sleep_s": 0.3, "n": 7}, target="effect")
    async with MeshClient(conn) as first, MeshClient(conn) as second:
        a, b = await asyncio.gather(
            first.send(envelope, wait_s=10), second.send(envelope, wait_s=10)
        )
        # a third submission after the end is answered from the stored Result
        c = await first.send(envelope, wait_s=10)
    assert a.status == b.status == c.status == "completed"
    assert a == b == c
    assert await _count(conn, f"runs:{envelope.task_id}") == 1
    assert await _count(conn, f"work:{envelope.task_id}") == 1
    assert worker.executed == 1


async def test_redelivery_of_a_finished_task_does_not_run_it_again(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    worker = await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        envelope = TaskEnvelope(capability="do it", target="effect", reply_to=client.reply_to)
        first = await client.send(envelope, wait_s=10)
        # the very same dispatch delivered again, straight into the agent queue
        publisher = Publisher(conn)
        await publisher.start()
        add_cleanup(publisher.close)
        stamped = envelope.model_copy(update={"deadline_ms": now_ms() + 10_000})
        for _ in range(2):
            await publisher.publish_envelope(
                conn.topology.capabilities, conn.topology.agent_routing_key("effect"), stamped
            )
        # a later task down the same agent queue: once its Result is back, the two copies
        # ahead of it were delivered and claimed (a wrong rerun would have started by then)
        probe = await client.request("probe", target="effect", wait_s=10)
        await worker.run_until_idle()
    assert first.status == probe.status == "completed"
    assert await _count(conn, f"runs:{envelope.task_id}") == 1
    assert worker.executed == 2  # the task once, and the probe
    assert client.results_received == 2
    # a copy answered from the stored Result may come back (replied marks are batched),
    # never one that disagrees with it
    assert client.conflicting_results == 0


async def test_stale_token_cannot_commit_nor_apply_its_side_effect(
    conn: MeshConnection, settings: Settings
) -> None:
    store = TaskStore(conn.redis, conn.keys, settings)
    a_member = LeaseMembership(conn, "effect", "effect-a")
    b_member = LeaseMembership(conn, "effect", "effect-b")
    await a_member.start(lambda: 0)
    await b_member.start(lambda: 0)
    try:
        envelope = TaskEnvelope(capability="x", target="effect")
        a = Holder("effect-a", a_member.token)
        b = Holder("effect-b", b_member.token)
        end = now_ms() + 60_000
        claim_a = await store.claim(
            envelope, a, agent_id="effect", redelivered=False, lifetime_end_ms=end, pristine=True
        )
        assert claim_a.status == "claimed"
        busy = await store.claim(
            envelope, b, agent_id="effect", redelivered=True, lifetime_end_ms=end
        )
        assert busy.status == "busy"  # a's lease is alive: no takeover
        await a_member.lose_lease()
        claim_b = await store.claim(
            envelope, b, agent_id="effect", redelivered=True, lifetime_end_ms=end
        )
        assert claim_b.status == "claimed" and claim_b.takeover
        assert await store.apply_once(envelope.task_id, b, "pay") == 1
        assert await store.apply_once(envelope.task_id, a, "pay") == -1
        assert await store.apply_once(envelope.task_id, b, "pay") == 0
        late = Result(task_id=envelope.task_id, status="completed", output={"by": "a"})
        assert (await store.finish(late, "completed", by="effect-a", holder=a)).status == "stale"
        good = Result(task_id=envelope.task_id, status="completed", output={"by": "b"})
        assert (await store.finish(good, "completed", by="effect-b", holder=b)).status == "ok"
        again = await store.finish(late, "completed", by="effect-a", holder=a)
        assert again.status == "done" and again.result == good
        assert await _count(conn, "pay") == 1
        states = [h["state"] for h in await store.history(envelope.task_id)]
        assert states == ["accepted", "processing", "accepted", "processing", "completed"]
    finally:
        await a_member.stop()
        await b_member.stop()


async def test_a_commit_whose_task_record_vanished_under_its_claim_is_recovered_and_stored(
    conn: MeshConnection, settings: Settings
) -> None:
    """A Redis failover can lose a task's record (hash and history) while its claim lives:
    the holder's commit recovers the record (accepted, processing, marked recovered) and
    stores its Result, so the worker answers it; another instance's commit stays stale."""
    store = TaskStore(conn.redis, conn.keys, settings)
    member = LeaseMembership(conn, "effect", "effect-a")
    await member.start(lambda: 0)
    try:
        envelope = TaskEnvelope(capability="x", target="effect")
        holder = Holder("effect-a", member.token)
        end = now_ms() + 60_000
        claim = await store.claim(
            envelope,
            holder,
            agent_id="effect",
            redelivered=False,
            lifetime_end_ms=end,
            pristine=True,
        )
        assert claim.status == "claimed"
        task_id = envelope.task_id
        lost = await conn.redis.delete(conn.keys.task(task_id), conn.keys.task_history(task_id))
        assert lost == 2
        other = Holder("effect-b", member.token)
        result = Result(task_id=task_id, status="completed", output={"n": 1})
        stale = await store.finish(result, "completed", by="effect-b", holder=other)
        assert stale.status == "stale"
        commit = await store.finish(
            result, "completed", by="effect-a", holder=holder, agent_id="effect"
        )
        assert commit.status == "ok", commit
        assert commit.body and Result.model_validate_json(commit.body) == result
        task = await conn.redis.hgetall(conn.keys.task(task_id))
        assert task[b"state"] == b"completed" and task[b"recovered"] == b"1"
        history = await store.history(task_id)
        assert [h["state"] for h in history] == ["accepted", "processing", "completed"]
        assert {h["note"] for h in history} == {"recovered"}
        again = await store.finish(result, "completed", by="effect-a", holder=holder)
        assert again.status == "done" and again.result == result
    finally:
        await member.stop()


@pytest.mark.access_off(
    "the test sends Results by hand; with it on a client believes only a router (test_access_mesh)"
)
async def test_client_hands_out_the_first_copy_of_a_result_and_flags_a_conflict(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """At-least-once Results: the caller gets one; an identical copy is dropped, a copy
    that disagrees (a sign that the task ran twice) is counted and logged."""
    publisher = Publisher(conn)
    await publisher.start()
    add_cleanup(publisher.close)
    copies: list[Result] = []
    # no router: the Results are sent by hand; `on_result` sees every copy accepted
    async with MeshClient(conn, on_result=copies.append, wait_for_router=True) as client:
        envelope = TaskEnvelope(capability="echo", reply_to=client.reply_to)
        waiting = asyncio.ensure_future(client.send(envelope, wait_s=10))
        first = Result(task_id=envelope.task_id, status="completed", output={"n": 1})
        await wait_until(lambda: envelope.task_id in client._waiters)
        await publisher.reply(client.reply_to, first)
        assert await waiting == first
        await publisher.reply(client.reply_to, first)
        await publisher.reply(client.reply_to, Result(task_id=envelope.task_id, status="failed"))
        await wait_until(lambda: client.duplicate_results == 2)
        assert client.results_received == 1 and client.conflicting_results == 1
        assert [c.status for c in copies] == ["completed", "completed", "failed"]


async def test_redelivered_ingress_copy_of_an_answered_task_is_not_answered_again(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """A router that lost its channel before acking leaves the ingress message to be
    redelivered; once the task is finished and its caller answered, the copy sends nothing.
    A new submission of the task_id (by the same or another caller) still gets the Result."""
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    async with MeshClient(conn) as client:
        envelope = TaskEnvelope(capability="do it", target="effect", reply_to=client.reply_to)
        first = await client.send(envelope, wait_s=10)
    assert first.status == "completed"
    # workers write the "replied" marks in batches, a few ms after the reply
    await wait_until(lambda: _replied(store, envelope.task_id), timeout=5)
    states = ("submitted", "routing")
    copy = await store.submit(envelope, redelivered=True, states=states, by="test")
    assert copy.status == "answered"
    again = await store.submit(envelope, redelivered=False, states=states, by="test")
    assert again.status == "done" and again.result == first
    other = envelope.model_copy(update={"reply_to": "someone-else"})
    stranger = await store.submit(other, redelivered=True, states=states, by="test")
    assert stranger.status == "done"


async def _replied(store: TaskStore, task_id: str) -> bool:
    return (await store.holder_of(task_id)).get("replied") == "1"


async def test_replied_marks_of_every_store_on_one_client_go_in_one_round_trip(
    conn: MeshConnection,
) -> None:
    """A process hosts many agents, one runtime (and one `ReplyMarks`) each, on one Redis
    client: their marks wait in one batch and are written by one pipeline."""
    views = [conn.keys.for_agent(a) for a in ("a", "b")]
    marks = [ReplyMarks(TaskStore(conn.redis, k, conn.settings), interval_s=60) for k in views]
    with pipelines_counted(conn.redis) as pipelines:
        marks[0].mark("t1")
        marks[1].mark("t2")
        await marks[1].flush()
    assert pipelines.n == 1
    for k, task_id in zip(views, ("t1", "t2"), strict=True):
        assert await conn.redis.hget(k.idem(task_id), "replied") == b"1"
    # one runtime closing writes what waits; the others go on marking
    marks[0].mark("t3")
    await marks[1].close()
    assert await conn.redis.hget(views[0].idem("t3"), "replied") == b"1"
    marks[0].mark("t4")
    await marks[0].close()
    assert await conn.redis.hget(views[0].idem("t4"), "replied") == b"1"


async def test_replied_marks_ride_the_next_pipeline_of_claims_and_commits(
    conn: MeshConnection, settings: Settings
) -> None:
    """A mark waits for the next pipeline of the client's calls and rides it (no round
    trip of its own); with no call to ride, it goes alone once its interval is over."""
    store = TaskStore(conn.redis, conn.keys, settings)
    marks = ReplyMarks(store, interval_s=60)
    holder = Holder("i-ride", 1, fenced=False)

    async def claim() -> str:
        envelope = TaskEnvelope(capability="x", target="effect")
        end = now_ms() + 60_000
        claimed = await store.claim(
            envelope,
            holder,
            agent_id="effect",
            redelivered=False,
            lifetime_end_ms=end,
            pristine=True,
        )
        return claimed.status

    with pipelines_counted(conn.redis) as pipelines:
        marks.mark("ridden")
        statuses = await asyncio.gather(claim(), claim())
    assert statuses == ["claimed", "claimed"]
    assert pipelines.n == 1  # the two claims and the mark
    assert await _replied(store, "ridden")
    # a lone claim goes as a plain FCALL, unless a mark waits: then both in one pipeline
    marks.mark("ridden-2")
    with pipelines_counted(conn.redis) as pipelines:
        assert await claim() == "claimed"
    assert pipelines.n == 1
    assert await _replied(store, "ridden-2")
    # nothing to ride with: alone, after the interval
    soon = ReplyMarks(store, interval_s=0.05)
    soon.mark("alone")
    assert not await _replied(store, "alone")
    await wait_until(lambda: _replied(store, "alone"), timeout=2)


async def test_submissions_made_together_go_in_one_round_trip(
    conn: MeshConnection, settings: Settings
) -> None:
    """A router recording many arrivals at once (a batch of ingress deliveries) sends their
    submissions in one pipeline; each gets its own answer, the duplicate among them too."""
    store = TaskStore(conn.redis, conn.keys, settings)
    envelopes = [TaskEnvelope(capability="x", target="effect") for _ in range(5)]
    envelopes.append(envelopes[0])  # the same task twice in one batch
    with pipelines_counted(conn.redis) as pipelines:
        submissions = await asyncio.gather(
            *(
                store.submit(e, redelivered=False, states=["submitted", "routing"], by="r")
                for e in envelopes
            )
        )
    assert pipelines.n == 1
    assert [s.status for s in submissions] == ["new"] * 5 + ["pending"]
    for e in envelopes[:5]:
        assert await conn.redis.hget(conn.keys.task(e.task_id), "state") == b"routing"
