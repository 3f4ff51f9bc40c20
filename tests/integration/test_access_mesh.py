"""The mesh under its own users (identity issue): a registry, a router, a worker and two
clients each log in as their provisioned user with MESH_ACCESS_CONTROL=true and
MESH_TOPOLOGY=passive. Legitimate traffic completes; each forgery is refused by the broker
or ignored by the mesh, and nothing of it reaches the victim."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from redis.exceptions import NoPermissionError

from mesh import Agent, MeshClient, TaskContext
from mesh.access.roles import Role
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.messaging import Publisher, result_message
from mesh.registry.events import down_event
from mesh.registry.snapshot import AgentSnapshot
from mesh.router.bids import BidCollector
from mesh.schemas import Bid, Event, Result, TaskEnvelope, encode, now_ms
from mesh.services import start_registry, start_worker
from tests.conftest import wait_until
from tests.integration.access_kit import AGENT_A, AGENT_B, CLIENT, Provisioned, start_router_as

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BOB = "mobile"


def _payer(applied: list[str]) -> Agent:
    agent = Agent(AGENT_A, "Pays once per task", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        if await ctx.apply_once("pay"):
            applied.append(task.task_id)
        return {"paid": task.payload.get("n")}

    return agent


async def test_the_mesh_runs_under_its_own_users_and_believes_no_forgery(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    router = await start_router_as(as_user, add_cleanup)
    applied: list[str] = []
    worker_conn = await as_user(Role("worker", AGENT_A))
    add_cleanup(await start_worker(worker_conn, _payer(applied), grace_s=2))
    alice_conn = await as_user(Role("client", CLIENT))
    bob_conn = await as_user(Role("client", BOB))
    intruder = await as_user(Role("worker", AGENT_B))

    async with MeshClient(alice_conn) as alice, MeshClient(bob_conn) as bob:
        # legitimate: alice's task runs on A and its Result comes from the router
        first = await alice.request("pay", {"n": 1}, target=AGENT_A, wait_s=20)
        assert first.status == "completed" and first.output == {"paid": 1}
        assert applied == [first.task_id] and alice.forged_results == 0
        forwarder = router.results
        assert forwarder is not None
        await wait_until(lambda: forwarder.forwarded == 1, timeout=5)

        # bob reuses alice's task_id: refused to him, nothing more for alice
        stolen = TaskEnvelope(
            task_id=first.task_id, capability="pay", target=AGENT_A, payload={"n": 666}
        )
        answer = await bob.send(stolen, wait_s=10)
        assert answer.status == "failed" and answer.error is not None
        assert answer.error.code == "task_id_in_use"
        assert answer.output is None and applied == [first.task_id]

        # bob joins alice's trace (to read its shared context): refused the same way
        joined = TaskEnvelope(
            trace_id=first.trace_id or "",
            capability="pay",
            target=AGENT_A,
            context_ref=f"ctx:{first.trace_id}:1",
        )
        answer = await bob.send(joined, wait_s=10)
        assert answer.error is not None and answer.error.code == "task_id_in_use"
        assert applied == [first.task_id]

        # bob aims his Result at alice's reply queue: refused, nothing reaches alice
        refused = router.refused
        aimed = TaskEnvelope(capability="pay", target=AGENT_A, reply_to=alice.reply_to)
        await bob.submit(aimed)
        await wait_until(lambda: router.refused > refused, timeout=10)

        # B's worker forges a result notice for alice's task: the router does not believe it
        channel = await intruder.channel()
        results = await channel.get_exchange(intruder.topology.results, ensure=False)
        forged = Result(task_id=first.task_id, status="completed", output={"paid": 1_000_000})
        notice = result_message(forged)
        notice.user_id = mesh_access.user(Role("worker", AGENT_B))
        await results.publish(notice, routing_key=intruder.topology.results_key)
        await wait_until(lambda: forwarder.refused >= 1, timeout=5)

        # ...and cannot write alice's reply queue itself (no write on replies, nor amq.default)
        key = intruder.topology.reply_key(alice.reply_to)
        replies = await channel.get_exchange(intruder.topology.replies, ensure=False)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await replies.publish(aio_pika.Message(b"{}"), routing_key=str(key))

        # alice's next task still completes, and she saw exactly her own two Results
        second = await alice.request("pay", {"n": 2}, target=AGENT_A, wait_s=20)
        assert second.status == "completed"
    assert alice.results_received == 2 and alice.forged_results == 0
    assert alice.duplicate_results == 0 and alice.conflicting_results == 0
    assert applied == [first.task_id, second.task_id]


async def test_another_agents_worker_cannot_answer_end_or_read_its_tasks_through_redis(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    """The task records are the mesh's: agent B's worker may not read or write them, nor
    agent A's view of them (where A's workers claim and commit), nor A's sealed copy, nor
    whom a router dispatched a task to. So B can neither answer a task of A's (through a
    notice or through Redis), nor end or hold it up, nor read its Result; A's callers get
    A's Results, every one."""
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    router = await start_router_as(as_user, add_cleanup)
    gate = asyncio.Event()
    started: list[str] = []
    agent = Agent(AGENT_A, "Pays when told to go on", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        started.append(task.task_id)
        if task.payload.get("wait"):
            await gate.wait()
        return {"paid": task.payload.get("n")}

    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), agent, grace_s=2))
    intruder = await as_user(Role("worker", AGENT_B))
    keys = intruder.keys
    forwarder = router.results
    assert forwarder is not None
    channel = await intruder.channel()
    results = await channel.get_exchange(intruder.topology.results, ensure=False)

    async def notice_as_b(result: Result) -> None:
        message = result_message(result)
        message.user_id = mesh_access.user(Role("worker", AGENT_B))
        await results.publish(message, routing_key=intruder.topology.results_key)

    def every_record_of(task_id: str) -> list[str]:
        view = keys.for_agent(AGENT_A)
        return [
            keys.task(task_id),
            keys.task_history(task_id),
            keys.task_waiters(task_id),
            keys.idem(task_id),
            view.task(task_id),
            view.idem(task_id),
            view.task_history(task_id),
            keys.sealed(AGENT_A, task_id),
            keys.dispatched_to(task_id),
        ]

    async with MeshClient(await as_user(Role("client", CLIENT))) as alice:
        first = await alice.request("pay", {"n": 1}, target=AGENT_A, wait_s=20)
        assert first.output == {"paid": 1}
        forged = Result(task_id=first.task_id, status="completed", output={"paid": 10**6})
        for key in every_record_of(first.task_id):
            with pytest.raises(NoPermissionError):  # read
                await intruder.redis.type(key)
            with pytest.raises(NoPermissionError):  # write
                await intruder.redis.hset(key, "result", encode(forged))
            with pytest.raises(NoPermissionError):  # end
                await intruder.redis.delete(key)
        refused = forwarder.refused
        await notice_as_b(forged)  # "the task is mine now": it never went to B
        await wait_until(lambda: forwarder.refused == refused + 1, timeout=5)
        # alice asks again for her finished task: answered from A's sealed copy
        again = await alice.send(
            TaskEnvelope(task_id=first.task_id, capability="pay", target=AGENT_A), wait_s=10
        )
        assert again.output == {"paid": 1}

        # a task of A's still running: B can touch none of its records, A's Result comes
        envelope = TaskEnvelope(capability="pay", target=AGENT_A, payload={"n": 2, "wait": 1})
        waiting = asyncio.ensure_future(alice.send(envelope, wait_s=10))
        await wait_until(lambda: envelope.task_id in started, timeout=10)
        late = Result(task_id=envelope.task_id, status="completed", output={"paid": 10**6})
        for key in every_record_of(envelope.task_id):
            with pytest.raises(NoPermissionError):
                await intruder.redis.hset(key, "result", encode(late))
        await notice_as_b(late)
        gate.set()
        second = await waiting
        assert second.output == {"paid": 2}
        third = await alice.request("pay", {"n": 3}, target=AGENT_A, wait_s=20)
        assert third.output == {"paid": 3}
    assert alice.results_received == 4 and alice.forged_results == 0
    assert alice.conflicting_results == 0
    # the mesh's record carries the whole path, the agent's steps included
    store = TaskStore(router.conn.redis, router.conn.keys, router.conn.settings)
    states = [h["state"] for h in await store.history(envelope.task_id)]
    assert states == ["submitted", "routing", "dispatched", "accepted", "processing", "completed"]


async def test_a_worker_cannot_answer_another_agents_task_with_a_copy_sealed_for_its_own(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    """What an agent seals under its own keys is believed for its own task only: A's worker
    seals, for a task of A's that finished, a Result naming a task of B's that is still
    running, and sends a notice for its own task. The router refuses it: B's record is not
    finished from it and B's caller gets B's Result."""
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    router = await start_router_as(as_user, add_cleanup)
    forwarder = router.results
    assert forwarder is not None
    gate = asyncio.Event()
    started: list[str] = []
    payer = Agent(AGENT_A, "Pays", max_concurrency=4)
    holder = Agent(AGENT_B, "Waits, then pays", max_concurrency=4)

    @payer.handler
    async def pay(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"paid": task.payload.get("n")}

    @holder.handler
    async def hold(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        started.append(task.task_id)
        await gate.wait()
        return {"paid": task.payload.get("n")}

    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), payer, grace_s=2))
    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_B)), holder, grace_s=2))
    attacker = await as_user(Role("worker", AGENT_A))
    channel = await attacker.channel()
    results = await channel.get_exchange(attacker.topology.results, ensure=False)
    async with MeshClient(await as_user(Role("client", CLIENT))) as alice:
        own = await alice.request("pay", {"n": 1}, target=AGENT_A, wait_s=20)
        assert own.output == {"paid": 1}
        victim = TaskEnvelope(capability="pay", target=AGENT_B, payload={"n": 2})
        waiting = asyncio.ensure_future(alice.send(victim, wait_s=20))
        await wait_until(lambda: victim.task_id in started, timeout=10)
        forged = Result(task_id=victim.task_id, status="completed", output={"paid": 10**6})
        # A's own key: its Redis user may write it
        await attacker.redis.set(attacker.keys.sealed(AGENT_A, own.task_id), encode(forged))
        refused = forwarder.refused
        notice = result_message(own)
        notice.user_id = mesh_access.user(Role("worker", AGENT_A))
        await results.publish(notice, routing_key=attacker.topology.results_key)
        await wait_until(lambda: forwarder.refused == refused + 1, timeout=5)
        store = TaskStore(router.conn.redis, router.conn.keys, router.conn.settings)
        assert await store.stored_result(victim.task_id) is None
        gate.set()
        answer = await waiting
        assert answer.status == "completed" and answer.output == {"paid": 2}
    assert alice.results_received == 2 and alice.forged_results == 0
    assert alice.conflicting_results == 0 and alice.duplicate_results == 0


async def test_a_worker_may_submit_only_handoffs_of_its_own_tasks_never_another_task_id(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    """A task_id is its first sender's while its record lives, workers included: agent B's
    worker cannot re-submit a task of A's (to have A's answer, or its own, reach A's
    caller), nor join it; a worker's task must be a handoff of a task dispatched to its own
    agent, on that task's trace. A's caller gets A's Result."""
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    await start_router_as(as_user, add_cleanup)
    gate = asyncio.Event()
    started: list[str] = []
    agent = Agent(AGENT_A, "Pays when told to go on", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        started.append(task.task_id)
        await gate.wait()
        return {"paid": task.payload.get("n")}

    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), agent, grace_s=2))
    async with (
        MeshClient(await as_user(Role("client", CLIENT))) as alice,
        MeshClient(
            await as_user(Role("worker", AGENT_B)), client_id=f"{AGENT_B}-intruder"
        ) as intruder,
    ):
        envelope = TaskEnvelope(capability="pay", target=AGENT_A, payload={"n": 1})
        waiting = asyncio.ensure_future(alice.send(envelope, wait_s=20))
        await wait_until(lambda: envelope.task_id in started, timeout=10)
        attacks = [
            # the same task_id, aimed at the intruder's own agent or at A
            envelope.model_copy(update={"target": AGENT_B}),
            envelope.model_copy(update={"reply_to": None}),
            # a "handoff" of A's task: it was never dispatched to B
            TaskEnvelope(
                capability="pay",
                target=AGENT_B,
                trace_id=envelope.trace_id,
                parent_task_id=envelope.task_id,
            ),
            # a task of its own that is no handoff at all
            TaskEnvelope(capability="pay", target=AGENT_A, payload={"n": 666}),
        ]
        for attack in attacks:
            answer = await intruder.send(attack, wait_s=10)
            assert answer.status == "failed", attack
            assert answer.error is not None and answer.error.code == "task_id_in_use"
        gate.set()
        result = await waiting
        assert result.status == "completed" and result.output == {"paid": 1}
        assert started == [envelope.task_id]  # nothing else ran on A
    assert alice.results_received == 1 and alice.forged_results == 0


async def test_a_client_drops_results_not_sent_by_a_router(conn: MeshConnection) -> None:
    """On a broker without permissions anyone can write a reply queue: under access control
    the client itself drops what a router's user did not send, and counts it."""
    settings = conn.settings.model_copy(update={"access_control": True})
    guarded = MeshConnection(settings, name="guarded-client")
    await guarded.open()
    try:
        # no router here: the test sends the (forged) Result itself
        async with MeshClient(guarded, wait_for_router=True) as client:
            waiting = asyncio.create_task(
                client.send(TaskEnvelope(capability="x", timeout_ms=5_000), wait_s=3)
            )
            await wait_until(lambda: client._waiters, timeout=5)
            [task_id] = list(client._waiters)
            forged = result_message(Result(task_id=task_id, status="completed", output={}))
            channel = await conn.channel()
            replies = await channel.get_exchange(conn.topology.replies, ensure=False)
            forged.user_id = "guest"
            await replies.publish(forged, routing_key=str(conn.topology.reply_key(client.reply_to)))
            await wait_until(lambda: client.forged_results == 1, timeout=5)
            assert not waiting.done()
            waiting.cancel()
    finally:
        await guarded.close()


async def _forged_down(snapshot: AgentSnapshot) -> Event:
    """Once A is live in `snapshot`: an ``agent.down`` for its instance, as a forger
    would write it (right instance id and token)."""
    await wait_until(lambda: snapshot.is_live(AGENT_A), timeout=10)
    [instance] = snapshot.agent(AGENT_A).live_instances(now_ms())  # type: ignore[union-attr]
    return down_event(
        AGENT_A,
        instance.instance_id,
        instance.token,
        "deregistered",
        lease_expires_ms=now_ms(),
        last_heartbeat_ms=now_ms(),
    )


async def test_a_snapshot_believes_agent_events_only_from_a_registry(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    """The router's view of the agents under its own (read-only) Redis user: it loads and
    follows the registry, and a forged ``agent.down`` changes nothing. On this broker only
    the registry may publish ``agent.*`` at all; the snapshot does not rely on that."""
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    worker_conn = await as_user(Role("worker", AGENT_A))
    add_cleanup(await start_worker(worker_conn, _payer([]), grace_s=2))
    snapshot = AgentSnapshot(await as_user(Role("router")))
    await snapshot.start()
    add_cleanup(snapshot.close)
    forged = await _forged_down(snapshot)
    # a worker of A may not publish agent.* on the events exchange (topic permission)
    channel = await worker_conn.channel()
    events = await channel.get_exchange(worker_conn.topology.events, ensure=False)
    message = aio_pika.Message(encode(forged), user_id=mesh_access.user(Role("worker", AGENT_A)))
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await events.publish(message, routing_key=forged.type)
    assert snapshot.is_live(AGENT_A)


async def test_under_access_control_a_forged_agent_down_is_ignored(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """On a broker without permissions anyone can publish ``agent.down``: a snapshot under
    access control ignores it unless a registry's user sent it (here nobody's is)."""
    add_cleanup(await start_registry(conn))
    add_cleanup(await start_worker(conn, _payer([]), grace_s=2))
    guarded = MeshConnection(conn.settings.model_copy(update={"access_control": True}))
    await guarded.open()
    add_cleanup(guarded.close)
    snapshot = AgentSnapshot(guarded)
    await snapshot.start()
    add_cleanup(snapshot.close)
    forged = await _forged_down(snapshot)
    channel = await conn.channel()
    events = await channel.get_exchange(conn.topology.events, ensure=False)
    await events.publish(aio_pika.Message(encode(forged)), routing_key=forged.type)
    await wait_until(lambda: snapshot.trust.ignored >= 1, timeout=5)
    assert snapshot.is_live(AGENT_A)


async def test_bids_travel_the_bids_exchange_and_count_only_from_their_agents_user(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    bidder = _payer([])

    @bidder.bidder
    async def bid(request: Any) -> float | None:
        await asyncio.sleep(1.0)  # the forged bid below arrives first, inside the window
        return 0.8

    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), bidder, grace_s=2))
    router_conn = await as_user(Role("router"))
    publisher = Publisher(router_conn)
    await publisher.start()
    add_cleanup(publisher.close)
    collector = BidCollector(router_conn, publisher)
    await collector.start()
    add_cleanup(collector.close)
    envelope = TaskEnvelope(capability="pay")

    async def forge() -> None:
        """Worker B answers for agent A while the window is open."""
        intruder = await as_user(Role("worker", AGENT_B))
        channel = await intruder.channel()
        bids = await channel.get_exchange(intruder.topology.bids, ensure=False)
        fake = Bid(
            task_id=envelope.task_id, agent_id=AGENT_A, instance_id=f"{AGENT_A}-x", confidence=1.0
        )
        message = aio_pika.Message(encode(fake), user_id=mesh_access.user(Role("worker", AGENT_B)))
        await bids.publish(message, routing_key=collector._key)

    forging = asyncio.create_task(forge())
    best, bids = await collector.call(envelope, [AGENT_A], window_ms=3_000)
    await forging
    assert best is not None and best.agent_id == AGENT_A and best.confidence == 0.8
    await wait_until(lambda: collector.refused == 1, timeout=5)
    assert all(b.confidence == 0.8 for b in bids)
