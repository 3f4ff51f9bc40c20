"""Under access control the registry believes the broker's user_id, never a body field
(identity issue, point 4): the registry and two workers run as their provisioned users;
worker B cannot register as agent A, take A's live instance id, or send A's heartbeats
and goodbyes, while A's own session works beside it."""

from __future__ import annotations

from typing import Any

import aio_pika
import aiormq.exceptions
import pytest

from mesh.access.roles import Role
from mesh.connection import MeshConnection
from mesh.errors import RegistryError
from mesh.registry import protocol
from mesh.registry.service import RegistryService
from mesh.registry.session import RegistrySession
from mesh.registry.state import load_state
from mesh.schemas import (
    BatchedBeat,
    Deregistration,
    Heartbeat,
    HeartbeatBatch,
    Registration,
    encode,
    now_ms,
)
from tests.conftest import wait_until
from tests.integration.access_kit import AGENT_A, AGENT_B, Provisioned

pytestmark = pytest.mark.integration


def _registration(agent_id: str, instance_id: str) -> Registration:
    return Registration(agent_id=agent_id, instance_id=instance_id, capability_text="pays")


async def test_only_an_agents_own_user_speaks_for_it(
    mesh_access: Provisioned,
    as_user: Any,
    add_cleanup: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = RegistryService(await as_user(Role("registry")))
    await registry.start()
    add_cleanup(registry.close)
    worker_a = await as_user(Role("worker", AGENT_A))
    worker_b = await as_user(Role("worker", AGENT_B))

    own = RegistrySession(worker_a, _registration(AGENT_A, f"{AGENT_A}-1"))
    await own.start(lambda: 0)
    add_cleanup(own.stop)
    assert own.token >= 1

    # B cannot even open a session queue named for an instance of A (broker permissions)
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await RegistrySession(worker_b, _registration(AGENT_A, f"{AGENT_A}-2")).start(lambda: 0)

    async def send(conn: MeshConnection, message: aio_pika.Message) -> None:
        """What an attacker does by hand: publish to the registry as itself."""
        channel = await conn.channel()
        try:
            exchange = await channel.get_exchange(conn.topology.registry, ensure=False)
            message.user_id = _user(mesh_access, conn)
            await exchange.publish(message, routing_key=conn.topology.registry_key)
        finally:
            await channel.close()

    def register(agent_id: str, instance_id: str) -> aio_pika.Message:
        return protocol.register_message(
            _registration(agent_id, instance_id),
            reply_to="nobody",
            correlation_id="c",
            expiration_s=5,
        )

    registered = registry.stats["registered"]
    await send(worker_b, register(AGENT_A, f"{AGENT_A}-2"))  # not B's agent
    await send(worker_a, register(AGENT_A, "other-1"))  # not an instance id of A
    await send(worker_a, register(AGENT_A, f"{AGENT_A}-1"))  # held by the live session
    goodbye = Deregistration(agent_id=AGENT_A, instance_id=f"{AGENT_A}-1", token=own.token)
    await send(worker_b, protocol.deregister_message(goodbye))  # B forges A's goodbye

    await wait_until(lambda: registry.stats["refused"] >= 4, timeout=5)
    assert registry.stats["registered"] == registered and registry.stats["refused"] == 4
    said = "\n".join(r.getMessage() for r in caplog.records if "refused" in r.getMessage())
    assert f"instance {AGENT_A}-2 refused: broker user" in said
    assert "instance other-1 refused: instance id 'other-1'" in said
    assert f"instance {AGENT_A}-1 refused: instance '{AGENT_A}-1' is held by a live session" in said
    assert f"deregistration of instance {AGENT_A}-1 refused: broker user" in said
    state = await load_state(registry.conn.redis, registry.conn.keys)  # a worker reads less
    live = state[AGENT_A].live_instances(now_ms())
    assert [i.instance_id for i in live] == [f"{AGENT_A}-1"]
    assert own.registrations == 1 and own.token >= 1

    # and a message that claims another user is refused by the broker itself
    forged = aio_pika.Message(b"{}", user_id=mesh_access.user(Role("registry")))
    channel = await worker_b.channel()
    registry_ex = await channel.get_exchange(worker_b.topology.registry, ensure=False)
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed):
        await registry_ex.publish(forged, routing_key=worker_b.topology.registry_key)


def _user(mesh_access: Provisioned, conn: MeshConnection) -> str:
    for agent in (AGENT_A, AGENT_B):
        role = Role("worker", agent)
        if mesh_access.creds(role).amqp_url == conn.settings.amqp_url.get_secret_value():
            return mesh_access.user(role)
    raise AssertionError("not a worker connection")


async def test_an_agent_user_cannot_register_without_bound(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conn = await as_user(Role("registry"))
    conn.settings = conn.settings.model_copy(update={"max_instances_per_agent": 1})
    registry = RegistryService(conn)
    await registry.start()
    add_cleanup(registry.close)
    worker_a = await as_user(Role("worker", AGENT_A))
    first = RegistrySession(worker_a, _registration(AGENT_A, f"{AGENT_A}-1"))
    await first.start(lambda: 0)
    add_cleanup(first.stop)
    second = RegistrySession(worker_a, _registration(AGENT_A, f"{AGENT_A}-2"), register_timeout_s=5)
    with pytest.raises(RegistryError, match="too_many_instances"):
        await second.start(lambda: 0)
    await second.stop()
    assert registry.stats["registered"] == 1 and registry.stats["refused"] == 1


async def _publish_as(conn: MeshConnection, user: str, message: aio_pika.Message) -> None:
    """What an attacker does by hand: publish to the registry as itself."""
    channel = await conn.channel()
    try:
        exchange = await channel.get_exchange(conn.topology.registry, ensure=False)
        message.user_id = user
        await exchange.publish(message, routing_key=conn.topology.registry_key)
    finally:
        await channel.close()


async def _refused(conn: MeshConnection, registration: Registration, code: str) -> None:
    session = RegistrySession(conn, registration, register_timeout_s=5)
    with pytest.raises(RegistryError, match=code):
        await session.start(lambda: 0)
    await session.stop()


async def test_an_agents_own_credential_claims_no_bonus_or_capacity_beyond_its_bounds(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    conn = await as_user(Role("registry"))
    conn.settings = conn.settings.model_copy(
        update={
            "priority_bonus_limits": {AGENT_B: 0.3},  # the operator's grant to B alone
            "max_instance_concurrency": 64,
            "heartbeat_s": 5.0,  # the sessions' own beats stay out of the way
            "lease_ttl_s": 15.0,
        }
    )
    registry = RegistryService(conn)
    await registry.start()
    add_cleanup(registry.close)
    worker_a = await as_user(Role("worker", AGENT_A))
    worker_b = await as_user(Role("worker", AGENT_B))

    # the phishing profile: A claims a bonus nobody granted it, or a capacity beyond bound
    phishing = _registration(AGENT_A, f"{AGENT_A}-1").model_copy(update={"priority_bonus": 1.0})
    await _refused(worker_a, phishing, "priority_bonus_too_high")
    greedy = _registration(AGENT_A, f"{AGENT_A}-1").model_copy(update={"max_concurrency": 65})
    await _refused(worker_a, greedy, "max_concurrency_too_high")
    # within the bounds, beside it: A at the cap, B with the bonus it was granted
    own = _registration(AGENT_A, f"{AGENT_A}-1").model_copy(update={"max_concurrency": 64})
    session_a = RegistrySession(worker_a, own)
    await session_a.start(lambda: 0)
    add_cleanup(session_a.stop)
    granted = _registration(AGENT_B, f"{AGENT_B}-1").model_copy(update={"priority_bonus": 0.3})
    session_b = RegistrySession(worker_b, granted)
    await session_b.start(lambda: 0)
    add_cleanup(session_b.stop)
    state = await load_state(registry.conn.redis, registry.conn.keys)
    assert state[AGENT_B].registration is not None
    assert state[AGENT_B].registration.priority_bonus == 0.3
    assert state[AGENT_A].registration is not None
    assert state[AGENT_A].registration.priority_bonus == 0.0

    # a heartbeat of A's own session claiming more capacity counts as the bound
    session_a.suspend_heartbeats()
    user_a = mesh_access.user(Role("worker", AGENT_A))
    beat = Heartbeat(
        agent_id=AGENT_A,
        instance_id=f"{AGENT_A}-1",
        token=session_a.token,
        max_concurrency=5_000,
        in_flight=1,
        sent_ms=now_ms(),
    )
    await _publish_as(
        worker_a, user_a, protocol.heartbeat_message(beat, reply_to="", expiration_s=5)
    )
    instance = registry.conn.keys.instance(f"{AGENT_A}-1")

    async def applied() -> bool:
        return bool(await registry.conn.redis.hget(instance, "in_flight") == b"1")

    await wait_until(applied, timeout=5)
    assert await registry.conn.redis.hget(instance, "max_concurrency") == b"64"
    # and one beyond any bound is no heartbeat at all
    body = encode(beat).replace(b"5000", b"1000000")
    await _publish_as(
        worker_a,
        user_a,
        aio_pika.Message(body, content_type=protocol.JSON, type=protocol.HEARTBEAT),
    )
    await wait_until(lambda: "invalid heartbeat dropped" in caplog.text, timeout=5)
    assert await registry.conn.redis.hget(instance, "max_concurrency") == b"64"


async def test_an_agents_profile_changes_at_most_once_per_interval(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    conn = await as_user(Role("registry"))
    conn.settings = conn.settings.model_copy(update={"profile_change_interval_s": 30.0})
    registry = RegistryService(conn)
    await registry.start()
    add_cleanup(registry.close)
    worker_a = await as_user(Role("worker", AGENT_A))
    first = RegistrySession(worker_a, _registration(AGENT_A, f"{AGENT_A}-1"))
    await first.start(lambda: 0)
    add_cleanup(first.stop)

    # churn: another profile for the same agent at once is held back
    churn = _registration(AGENT_A, f"{AGENT_A}-2").model_copy(
        update={"capability_text": "pays, and refunds everything " * 100}
    )
    await _refused(worker_a, churn, "profile_change_too_soon")
    # a new instance with the current profile is not, nor are heartbeats
    second = RegistrySession(worker_a, _registration(AGENT_A, f"{AGENT_A}-3"))
    await second.start(lambda: 0)
    add_cleanup(second.stop)
    beats = registry.stats["heartbeats"]
    await wait_until(lambda: registry.stats["heartbeats"] >= beats + 2, timeout=5)
    state = await load_state(registry.conn.redis, registry.conn.keys)
    live = sorted(i.instance_id for i in state[AGENT_A].live_instances(now_ms()))
    assert live == [f"{AGENT_A}-1", f"{AGENT_A}-3"]
    assert state[AGENT_A].registration is not None
    assert state[AGENT_A].registration.capability_text == "pays"
    assert registry.stats["refused"] == 1


async def test_a_heartbeat_batch_is_believed_beat_by_beat(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A batch from B's worker that carries one of A's beats beside B's own: B's lease is
    renewed with its load, A's beat is refused (its user is not A's) and A's load stays."""
    conn = await as_user(Role("registry"))
    conn.settings = conn.settings.model_copy(update={"heartbeat_s": 5.0, "lease_ttl_s": 15.0})
    registry = RegistryService(conn)
    await registry.start()
    add_cleanup(registry.close)
    worker_a = await as_user(Role("worker", AGENT_A))
    worker_b = await as_user(Role("worker", AGENT_B))
    session_a = RegistrySession(worker_a, _registration(AGENT_A, f"{AGENT_A}-1"))
    session_b = RegistrySession(worker_b, _registration(AGENT_B, f"{AGENT_B}-1"))
    for s in (session_a, session_b):
        await s.start(lambda: 0)
        add_cleanup(s.stop)
        s.suspend_heartbeats()

    def beat(s: RegistrySession, in_flight: int) -> BatchedBeat:
        return BatchedBeat(
            agent_id=s.agent_id,
            instance_id=s.instance_id,
            token=s.token,
            in_flight=in_flight,
            sent_ms=now_ms(),
        )

    batch = HeartbeatBatch(beats=[beat(session_a, 7), beat(session_b, 3)])
    refused = registry.stats["refused"]
    await _publish_as(
        worker_b,
        mesh_access.user(Role("worker", AGENT_B)),
        protocol.heartbeats_message(batch, expiration_s=5),
    )
    mine = registry.conn.keys.instance(f"{AGENT_B}-1")

    async def applied() -> bool:
        return bool(await registry.conn.redis.hget(mine, "in_flight") == b"3")

    await wait_until(applied, timeout=5)
    assert registry.stats["refused"] == refused + 1
    theirs = registry.conn.keys.instance(f"{AGENT_A}-1")
    assert await registry.conn.redis.hget(theirs, "in_flight") == b"0"
    assert f"heartbeat of instance {AGENT_A}-1 refused: broker user" in caplog.text
    assert session_a.registrations == session_b.registrations == 1
