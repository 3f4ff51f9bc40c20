"""The registry on the real broker and Redis: leases, fencing, events, snapshots."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aio_pika
import pytest

from mesh import Agent, TaskContext, WorkerRuntime
from mesh.connection import MeshConnection
from mesh.errors import StaleFencingToken
from mesh.messaging import Publisher
from mesh.registry import protocol
from mesh.registry.fencing import check_token
from mesh.registry.lease import SWEEP_BATCH, Lapse
from mesh.registry.service import RegistryService
from mesh.registry.session import RegistrySession
from mesh.registry.snapshot import AgentSnapshot
from mesh.registry.state import load_instance
from mesh.schemas import Event, Registration, RegistrationAck, TaskEnvelope, decode, new_id, now_ms
from mesh.schemas.codec import dumps, loads
from mesh.wire import events_of
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

Cleanup = Callable[[Callable[[], Any]], None]


def registration(agent_id: str, instance_id: str | None = None, **extra: Any) -> Registration:
    return Registration(
        agent_id=agent_id,
        instance_id=instance_id or f"{agent_id}-{new_id()[:8]}",
        capability_text=extra.pop("capability_text", f"{agent_id} handles {agent_id} requests"),
        **extra,
    )


class EventLog:
    """Every ``agent.*`` event, stamped with its arrival time (epoch ms)."""

    def __init__(self) -> None:
        self.events: list[tuple[int, Event]] = []

    async def start(self, conn: MeshConnection) -> None:
        channel = await conn.channel(confirms=False)
        await conn.topology.declare(channel)
        queue = await channel.declare_queue(exclusive=True, auto_delete=True)
        await queue.bind(conn.topology.events, routing_key="agent.*")
        await queue.consume(self._on, no_ack=True)

    async def _on(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        self.events.extend((now_ms(), event) for event in events_of(message))

    def find(
        self, type_: str, instance_id: str, token: int | None = None
    ) -> list[tuple[int, Event]]:
        return [
            (at, e)
            for at, e in self.events
            if e.type == type_
            and e.instance_id == instance_id
            and (token is None or e.data.get("token") == token)
        ]


async def registry(conn: MeshConnection, add_cleanup: Cleanup) -> RegistryService:
    service = RegistryService(conn)
    await service.start()
    add_cleanup(service.close)
    return service


async def session(
    conn: MeshConnection, add_cleanup: Cleanup, reg: Registration, load: int = 0
) -> RegistrySession:
    s = RegistrySession(conn, reg, attempt_timeout_s=1.0)
    await s.start(lambda: load)
    add_cleanup(s.stop)
    return s


async def events(conn: MeshConnection) -> EventLog:
    log = EventLog()
    await log.start(conn)
    return log


async def test_register_grants_token_lease_and_up_event(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    log = await events(conn)
    await registry(conn, add_cleanup)
    reg = registration("refund", tags={"team": "support"})
    s = await session(conn, add_cleanup, reg)
    assert s.token >= 1
    inst = await load_instance(conn.redis, conn.keys, reg.instance_id)
    assert inst is not None and inst.status == "up" and inst.token == s.token
    await check_token(conn.redis, conn.keys, "refund", reg.instance_id, s.token)
    found = await wait_until(lambda: log.find("agent.up", reg.instance_id, s.token))
    event = found[0][1]
    assert event.data["registration"]["tags"] == {"team": "support"}
    assert event.agent_id == "refund"


async def test_lease_lapse_reported_within_ttl_plus_one_second(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    log = await events(conn)
    await registry(conn, add_cleanup)
    reg = registration("lapse")
    s = await session(conn, add_cleanup, reg)
    # one renewal at least, so the lease is a renewed one, not only the registration
    await wait_until(lambda: _renewed(conn, reg.instance_id), timeout=3)
    s.suspend_heartbeats()
    found = await wait_until(lambda: log.find("agent.down", reg.instance_id), timeout=5)
    arrived, event = found[0]
    inst = await load_instance(conn.redis, conn.keys, reg.instance_id)
    assert inst is not None and inst.status == "down" and inst.down_reason == "lease_expired"
    assert event.data["reason"] == "lease_expired"
    last_beat = int(event.data["last_heartbeat_ms"])
    assert last_beat == inst.last_heartbeat_ms
    latency = arrived - last_beat
    ttl_ms = conn.settings.lease_ttl_s * 1000
    print(f"agent.down {latency} ms after the last heartbeat (TTL {ttl_ms:.0f} ms)")
    assert ttl_ms <= latency <= ttl_ms + 1000
    with pytest.raises(StaleFencingToken):
        await s.check(event.data["token"])


async def test_an_idle_registry_sweeps_when_a_lease_may_lapse_not_every_tick(
    conn: MeshConnection, add_cleanup: Cleanup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Leases renewed in time: the registry asks Redis to sweep about once per span the
    earliest lease has left, not at every `sweep_interval_s` tick (a lapse is still reported
    within TTL + 1 s: the test above)."""
    service = await registry(conn, add_cleanup)
    s = await session(conn, add_cleanup, registration("idle"))
    await wait_until(lambda: _renewed(conn, s.instance_id), timeout=3)
    calls: list[float] = []
    sweep = service.store.sweep

    async def counted(limit: int = SWEEP_BATCH) -> list[Lapse]:
        calls.append(time.monotonic())
        return await sweep(limit)

    monkeypatch.setattr(service.store, "sweep", counted)
    window_s = 3.0
    await asyncio.sleep(window_s)  # what a registry does over a span: time is the fact here
    settings = conn.settings
    ticks = window_s / settings.sweep_interval_s
    # a heartbeat each 0.5 s keeps the lease 1 s ahead at least (TTL 1.5 s): a sweep a second
    spacing_s = settings.lease_ttl_s - settings.heartbeat_s
    assert 1 <= len(calls) <= window_s / spacing_s + 1 < ticks / 2, (len(calls), ticks)
    inst = await load_instance(conn.redis, conn.keys, s.instance_id)
    assert inst is not None and inst.status == "up" and inst.token == s.token


async def _renewed(conn: MeshConnection, instance_id: str) -> bool:
    inst = await load_instance(conn.redis, conn.keys, instance_id)
    return inst is not None and inst.last_heartbeat_ms > inst.registered_ms


async def test_graceful_deregistration_is_down_at_once(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    log = await events(conn)
    await registry(conn, add_cleanup)
    reg = registration("bye")
    s = await session(conn, add_cleanup, reg)
    token = s.token
    stopped = now_ms()
    await s.stop()
    await s.stop()  # idempotent
    found = await wait_until(lambda: log.find("agent.down", reg.instance_id), timeout=3)
    arrived, event = found[0]
    assert event.data["reason"] == "deregistered"
    assert arrived - stopped < conn.settings.lease_ttl_s * 1000 / 2
    inst = await load_instance(conn.redis, conn.keys, reg.instance_id)
    assert inst is not None and inst.status == "down" and inst.down_reason == "deregistered"
    with pytest.raises(StaleFencingToken):
        await check_token(conn.redis, conn.keys, "bye", reg.instance_id, token)
    # the sweep does not report it a second time: an instance registered after it, whose
    # lease then lapses, is reported by a sweep that ran after the first lease would have
    # ended too; by then a second report of the first would have landed
    later = await session(conn, add_cleanup, registration("bye-later"))
    later.suspend_heartbeats()
    (_, lapsed), *_ = await wait_until(
        lambda: log.find("agent.down", later.instance_id), timeout=conn.settings.lease_ttl_s + 3
    )
    assert lapsed.data["reason"] == "lease_expired"
    assert len(log.find("agent.down", reg.instance_id)) == 1


async def test_tokens_strictly_increase_across_two_registries_and_a_restart(
    mesh_env: Callable[..., Awaitable[MeshConnection]], add_cleanup: Cleanup
) -> None:
    conn_a, conn_b, client = await mesh_env("-a"), await mesh_env("-b"), await mesh_env("-c")
    reg_a = await registry(conn_a, add_cleanup)
    reg_b = await registry(conn_b, add_cleanup)

    sequential: list[int] = []
    for n in range(12):
        s = RegistrySession(client, registration("ledger", f"ledger-seq-{n}"))
        await s.start(lambda: 0)
        sequential.append(s.token)
        await s.stop()
    assert sequential == sorted(sequential) and len(set(sequential)) == len(sequential)

    sessions = [
        RegistrySession(client, registration("ledger", f"ledger-par-{n}")) for n in range(20)
    ]
    await asyncio.gather(*(s.start(lambda: 0) for s in sessions))
    concurrent = [s.token for s in sessions]
    await asyncio.gather(*(s.stop() for s in sessions))
    assert len(set(concurrent)) == len(concurrent)
    assert min(concurrent) > max(sequential)
    assert reg_a.stats["registered"] > 0 and reg_b.stats["registered"] > 0

    await reg_a.close()
    await reg_b.close()
    conn_c = await mesh_env("-restarted")
    await registry(conn_c, add_cleanup)
    s = RegistrySession(client, registration("ledger", "ledger-after-restart"))
    await s.start(lambda: 0)
    add_cleanup(s.stop)
    assert s.token > max(concurrent)


async def test_two_registries_report_each_lapse_once(
    mesh_env: Callable[..., Awaitable[MeshConnection]], add_cleanup: Cleanup
) -> None:
    conn_a, conn_b, client = await mesh_env("-a"), await mesh_env("-b"), await mesh_env("-c")
    log = await events(client)
    await registry(conn_a, add_cleanup)
    await registry(conn_b, add_cleanup)
    sessions = [
        await session(client, add_cleanup, registration("pair", f"pair-{n}")) for n in range(6)
    ]
    for s in sessions:
        s.suspend_heartbeats()
    for s in sessions:
        await wait_until(lambda s=s: log.find("agent.down", s.instance_id), timeout=5)
    # a few more sweep ticks of both registries: still one report each
    ticks = conn_a.settings.sweep_interval_s * 4
    await asyncio.sleep(ticks)  # waiting for the absence of an event: time is the fact here
    for s in sessions:
        assert len(log.find("agent.down", s.instance_id)) == 1


async def test_partition_old_session_commit_is_refused(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    """Seed 000 section 4.1: A loses its lease, re-registers; its old pending commit fails."""
    log = await events(conn)
    await registry(conn, add_cleanup)
    agent = Agent("payout", "Pays refunds out")
    started = asyncio.Event()
    gate = asyncio.Event()
    outcome: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        started.set()
        await gate.wait()
        try:
            await ctx.fence()
        except StaleFencingToken as exc:
            outcome.set_result(exc)
            raise
        outcome.set_result("committed")
        return {}

    iid = "payout-a"
    membership = RegistrySession(conn, agent.registration(iid), attempt_timeout_s=1.0)
    worker = WorkerRuntime(agent, conn, instance_id=iid, membership=membership)
    await worker.start()
    add_cleanup(worker.drain)
    old_token = membership.token

    publisher = Publisher(conn)
    await publisher.start()
    add_cleanup(publisher.close)
    envelope = TaskEnvelope(capability="pay refund 42", payload={"order": 42}, timeout_ms=60_000)
    await publisher.publish_envelope(
        conn.topology.capabilities, conn.topology.agent_routing_key("payout"), envelope
    )
    await asyncio.wait_for(started.wait(), timeout=5)

    membership.suspend_heartbeats()  # the partition
    await wait_until(lambda: log.find("agent.down", iid, old_token), timeout=5)
    membership.resume_heartbeats()  # the network heals: lease.lost -> re-register
    await wait_until(lambda: membership.token > old_token, timeout=5)
    assert log.find("agent.up", iid, membership.token)

    gate.set()  # the old session's pending commit
    refused = await asyncio.wait_for(outcome, timeout=5)
    assert isinstance(refused, StaleFencingToken)
    assert refused.token == old_token and refused.current == membership.token
    await membership.check(membership.token)  # the new session commits fine
    with pytest.raises(StaleFencingToken):
        await check_token(conn.redis, conn.keys, "payout", iid, old_token)


async def test_two_instances_of_one_agent_coexist(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    await registry(conn, add_cleanup)
    snapshot = AgentSnapshot(conn)
    await snapshot.start()
    add_cleanup(snapshot.close)
    one = await session(conn, add_cleanup, registration("twin", "twin-1", max_concurrency=4), 2)
    two = await session(conn, add_cleanup, registration("twin", "twin-2", max_concurrency=6), 3)
    assert one.token != two.token

    def loaded() -> bool:
        agent = snapshot.agent("twin")
        return agent is not None and agent.load(now_ms()) == 5

    await wait_until(loaded, timeout=3)
    agent = snapshot.agent("twin")
    assert agent is not None
    assert agent.capacity(now_ms()) == 10
    assert agent.tokens(now_ms()) == {"twin-1": one.token, "twin-2": two.token}
    # both fencing tokens are valid at once: they belong to different instances
    await one.check(one.token)
    await two.check(two.token)

    await two.stop()

    def one_left() -> bool:
        twin = snapshot.agent("twin")
        return twin is not None and len(twin.live_instances(now_ms())) == 1

    await wait_until(one_left)
    assert snapshot.is_live("twin")
    await one.check(one.token)
    inst = await load_instance(conn.redis, conn.keys, "twin-1")
    assert inst is not None and inst.status == "up"


async def test_late_snapshot_sees_existing_agents_and_follows_events(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    await registry(conn, add_cleanup)
    await session(conn, add_cleanup, registration("orders", capability_text="Looks up orders"))
    refunds = await session(conn, add_cleanup, registration("refunds", examples=["refund me"]))

    snapshot = AgentSnapshot(conn)
    changes: list[str] = []
    snapshot.on_change(changes.append)
    await snapshot.start()
    add_cleanup(snapshot.close)
    live = {a.agent_id: a for a in snapshot.live_agents()}
    assert set(live) == {"orders", "refunds"}
    assert live["orders"].registration is not None
    assert live["orders"].registration.capability_text == "Looks up orders"
    assert live["refunds"].registration is not None
    assert live["refunds"].registration.examples == ["refund me"]

    await session(conn, add_cleanup, registration("late"))
    await wait_until(lambda: snapshot.is_live("late"), timeout=3)
    assert "late" in changes
    version = snapshot.version

    await refunds.stop()
    await wait_until(lambda: not snapshot.is_live("refunds"), timeout=3)
    assert snapshot.version > version

    # a lapsed lease is not offered even before any event: checked at read time
    orders = snapshot.agent("orders")
    assert orders is not None
    expires = max(i.lease_expires_ms for i in orders.instances.values())
    assert "orders" not in {a.agent_id for a in snapshot.live_agents(at_ms=expires + 1)}


async def test_session_waits_for_a_registry_that_starts_later(
    conn: MeshConnection, add_cleanup: Cleanup, spawn: Any
) -> None:
    s = RegistrySession(conn, registration("patient"), attempt_timeout_s=0.3)
    add_cleanup(s.stop)
    task = spawn(s.start(lambda: 0))
    await wait_until(lambda: _queue_exists(conn, conn.topology.session_queue(s.instance_id)))
    assert not task.done()
    await registry(conn, add_cleanup)
    await asyncio.wait_for(task, timeout=10)
    assert s.token >= 1


async def _queue_exists(conn: MeshConnection, name: str) -> bool:
    channel = await conn.channel(confirms=False)
    try:
        await channel.get_queue(name, ensure=True)
        return True
    except aio_pika.exceptions.ChannelClosed:
        return False
    finally:
        if not channel.is_closed:
            await channel.close()


async def _rpc(
    conn: MeshConnection, message_for: Callable[[str, str], aio_pika.Message]
) -> aio_pika.abc.AbstractIncomingMessage:
    channel = await conn.channel(confirms=False)
    reply = await channel.declare_queue(exclusive=True, auto_delete=True)
    answers: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
    await reply.consume(answers.put, no_ack=True)
    exchange = await channel.get_exchange(conn.topology.registry, ensure=False)
    message = message_for(reply.name, new_id())
    await exchange.publish(message, routing_key=conn.topology.registry_key)
    return await asyncio.wait_for(answers.get(), timeout=5)


async def test_a2a_agent_card_registers_as_it_is(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    await registry(conn, add_cleanup)
    card = {
        "name": "Currency Agent",
        "description": "Converts between currencies.",
        "url": "http://localhost:10000/",
        "version": "1.2.0",
        "capabilities": {"streaming": True},
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": [
            {
                "id": "convert_currency",
                "name": "Currency Exchange Rates Tool",
                "description": "Helps with exchange values between various currencies",
                "tags": ["currency conversion", "currency exchange"],
                "examples": ["What is exchange rate between USD and GBP?"],
            }
        ],
    }
    answer = await _rpc(
        conn,
        lambda reply_to, cid: protocol.card_message(
            card, instance_id="fx-1", reply_to=reply_to, correlation_id=cid, max_concurrency=2
        ),
    )
    assert answer.type == protocol.ACK
    ack = decode(RegistrationAck, answer.body)
    assert ack.agent_id == "currency-agent" and ack.instance_id == "fx-1" and ack.token >= 1
    snapshot = AgentSnapshot(conn)
    await snapshot.start()
    add_cleanup(snapshot.close)
    agent = snapshot.agent("currency-agent")
    assert agent is not None and agent.registration is not None
    reg = agent.registration
    assert "exchange values between various currencies" in reg.capability_text
    assert reg.examples == ["What is exchange rate between USD and GBP?"]
    assert reg.tags["currency exchange"] == "true" and reg.tags["protocol"] == "a2a"
    assert reg.supported_tasks == ["convert_currency"] and reg.max_concurrency == 2


async def test_invalid_registration_is_answered_and_dead_lettered(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    await registry(conn, add_cleanup)
    body = dumps({"agent_id": "x y", "instance_id": "i", "capability_text": ""})
    answer = await _rpc(
        conn,
        lambda reply_to, cid: aio_pika.Message(
            body, type=protocol.REGISTER, reply_to=reply_to, correlation_id=cid
        ),
    )
    assert answer.type == protocol.ERROR
    error = loads(answer.body)
    assert error["code"] == "invalid_registration"
    assert {e["loc"] for e in error["details"]["errors"]} >= {"agent_id", "capability_text"}
    channel = await conn.channel()
    dead = await channel.get_queue(conn.topology.dead_queue("invalid"), ensure=False)
    got = await wait_until(lambda: dead.get(no_ack=True, fail=False))
    assert got.body == body


async def test_sessions_on_one_connection_beat_together_in_one_message(
    conn: MeshConnection, add_cleanup: Cleanup
) -> None:
    """The sessions of one connection send their heartbeats as one `HeartbeatBatch` an
    interval (after one beat each to align); the registry renews every lease from it, and
    a lease lost in a batch is answered to its own session, which re-registers alone."""
    service = await registry(conn, add_cleanup)
    regs = [registration("beats", f"beats-{i}-{new_id()[:6]}") for i in range(12)]
    sessions = await asyncio.gather(*(session(conn, add_cleanup, reg) for reg in regs))
    for reg in regs:
        await wait_until(lambda reg=reg: _renewed(conn, reg.instance_id), timeout=5)
    before = dict(service.stats)
    rounds = 4
    interval = conn.settings.heartbeat_s
    await wait_until(
        lambda: service.stats["heartbeats"] - before["heartbeats"] >= rounds * len(regs),
        timeout=rounds * interval + 5,
    )
    beats = service.stats["heartbeats"] - before["heartbeats"]
    messages = service.stats["beat_messages"] - before["beat_messages"]
    print(f"{beats} heartbeats of {len(regs)} sessions in {messages} messages")
    assert beats >= rounds * len(regs)
    assert messages <= beats / 4, (beats, messages)
    assert service.stats["lost"] == before["lost"]
    assert all(s.registrations == 1 for s in sessions)

    # one lease of the batch lost: only that session hears it and registers again
    lost = sessions[5]
    await conn.redis.hset(conn.keys.instance(lost.registration.instance_id), "token", 0)
    await wait_until(lambda: lost.registrations == 2, timeout=5)
    inst = await load_instance(conn.redis, conn.keys, lost.registration.instance_id)
    assert inst is not None and inst.status == "up" and inst.token == lost.token
    assert [s.registrations for s in sessions if s is not lost] == [1] * (len(regs) - 1)


async def test_a_heartbeat_batch_from_a_plain_amqp_client_renews_each_lease(
    conn: MeshConnection, add_cleanup: Cleanup, caplog: pytest.LogCaptureFixture
) -> None:
    """The `heartbeats` wire as the AsyncAPI document says, from a client that never imports
    the mesh: each beat renews its lease, a beat with a wrong token is answered
    ``lease.lost`` on the reply queue it names, and a body that is no batch is dropped."""
    service = await registry(conn, add_cleanup)
    regs = [registration("plain", f"plain-{i}-{new_id()[:6]}") for i in range(2)]
    sessions = await asyncio.gather(*(session(conn, add_cleanup, reg) for reg in regs))
    for s in sessions:
        s.suspend_heartbeats()
    settings = conn.settings
    connection = await aio_pika.connect(settings.amqp_urls[0].get_secret_value())
    add_cleanup(connection.close)
    channel = await connection.channel()
    answers = await channel.declare_queue(exclusive=True, auto_delete=True)
    exchange = await channel.get_exchange(conn.topology.registry, ensure=False)
    sent = now_ms()
    beats = [
        {
            "agent_id": "plain",
            "instance_id": s.registration.instance_id,
            "token": s.token,
            "in_flight": 2,
            "sent_ms": sent,
        }
        for s in sessions
    ]
    beats.append({**beats[0], "token": sessions[0].token + 100, "reply_to": answers.name})
    body = dumps({"beats": beats})
    await exchange.publish(
        aio_pika.Message(body, content_type="application/json", type="heartbeats"),
        routing_key=conn.topology.registry_key,
    )
    notice = await wait_until(lambda: answers.get(fail=False), timeout=5)
    assert notice.type == "lease.lost"
    assert loads(notice.body) == {
        "instance_id": sessions[0].registration.instance_id,
        "token": sessions[0].token + 100,
    }
    for s in sessions:
        inst = await load_instance(conn.redis, conn.keys, s.registration.instance_id)
        assert inst is not None and inst.in_flight == 2 and inst.last_heartbeat_ms >= sent
    # an empty batch is no batch: dropped, and the single beat after it still counts
    taken = service.stats["beat_messages"]
    await exchange.publish(
        aio_pika.Message(b'{"beats": []}', content_type="application/json", type="heartbeats"),
        routing_key=conn.topology.registry_key,
    )
    one = {key: value for key, value in beats[1].items() if key != "reply_to"}
    await exchange.publish(
        aio_pika.Message(dumps({**one, "in_flight": 3}), type="heartbeat"),
        routing_key=conn.topology.registry_key,
    )
    instance = conn.keys.instance(sessions[1].registration.instance_id)
    await wait_until(lambda: _in_flight_is(conn, instance, 3), timeout=5)
    assert service.stats["beat_messages"] == taken + 1
    assert "invalid heartbeat batch dropped" in caplog.text


async def _in_flight_is(conn: MeshConnection, instance: str, n: int) -> bool:
    return bool(await conn.redis.hget(instance, "in_flight") == str(n).encode())
