"""Feedback under access control (identity issue): a client has no Redis access, so it
publishes its verdict to ``<ns>.feedback`` and a router applies it, only from the user that
submitted the task. Registry, router, worker and two clients run as their provisioned users
with MESH_ACCESS_CONTROL=true and MESH_TOPOLOGY=passive."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from typing import Any, cast

import aio_pika
import pytest
import redis.asyncio as redis_asyncio
import redis.exceptions

from mesh import Agent, MeshClient, TaskContext
from mesh.access.roles import Role
from mesh.connection import MeshConnection, connect
from mesh.errors import ConfigError
from mesh.router.feedback import ROUTE_RECORD_TTL_S
from mesh.router.memory import ExampleMemory
from mesh.schemas import Event, TaskEnvelope
from mesh.services import start_registry, start_worker
from mesh.wire import events_of
from tests.conftest import wait_until
from tests.integration.access_kit import (
    AGENT_A,
    CLIENT,
    Provisioned,
    role_settings,
    start_router_as,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BOB = "mobile"
TEXT = "my parcel was left at the wrong address"


class _RedisSpy:
    """Stands in for a client's Redis: records every use (none is expected)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        return getattr(self.real, name)


def _payer() -> Agent:
    agent = Agent(AGENT_A, "Pays once per task", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"paid": task.payload.get("n")}

    return agent


async def _follow_feedback_events(
    admin: MeshConnection, add_cleanup: Any
) -> list[tuple[str | None, Event]]:
    """(user_id, event) of every ``route.feedback`` event, as the admin sees them."""
    seen: list[tuple[str | None, Event]] = []
    channel = await admin.channel()
    add_cleanup(channel.close)
    queue = await channel.declare_queue(
        f"{admin.topology.namespace}.test.feedback-events", exclusive=True, auto_delete=True
    )
    await queue.bind(admin.topology.events, routing_key="route.feedback")

    async def on_event(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        seen.extend((message.user_id, event) for event in events_of(message))
        await message.ack()

    await queue.consume(on_event)
    return seen


async def _acl_denials(mesh_access: Provisioned, user: str) -> int:
    """How many commands Redis refused `user` (ACL LOG entries, with their repeat counts;
    read with the base login: the mesh's admin user may not run ACL)."""
    base = redis_asyncio.Redis.from_url(mesh_access.base_redis_url)
    try:
        entries = cast(list[dict[str, Any]], await base.acl_log(128))
        return sum(int(e["count"]) for e in entries if e["username"] == user)
    finally:
        await base.aclose()


async def test_only_the_tasks_owner_gives_feedback_through_the_router(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    admin = await connect(mesh_access.settings, name="test-access-feedback-admin")
    add_cleanup(admin.close)
    events = await _follow_feedback_events(admin, add_cleanup)
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    router = await start_router_as(as_user, add_cleanup)
    consumer = router.feedback
    assert consumer is not None
    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), _payer(), grace_s=2))
    alice_conn = await as_user(Role("client", CLIENT))
    bob_conn = await as_user(Role("client", BOB))
    alice_user = mesh_access.user(Role("client", CLIENT))

    # a client's Redis user may only PING: the direct path cannot work for it
    with pytest.raises(redis.exceptions.NoPermissionError):
        await alice_conn.redis.hgetall(admin.keys.outcome("any"))
    denied_before = await _acl_denials(mesh_access, alice_user)
    assert denied_before >= 1  # ...and Redis logs what it refuses her
    spy = _RedisSpy(alice_conn._redis)
    alice_conn._redis = spy
    add_cleanup(lambda: setattr(alice_conn, "_redis", spy.real))

    async with MeshClient(alice_conn) as alice, MeshClient(bob_conn) as bob:
        done = await alice.request("pay", {"n": 1}, target=AGENT_A, wait_s=20)
        unrouted = await alice.request("pay", {"n": 2}, target=AGENT_A, wait_s=20)
        assert done.status == unrouted.status == "completed"
        # a targeted task has no routing record; write the one semantic routing would
        # have (`mesh.router.outcomes`), as the admin
        record = admin.keys.outcome(done.task_id)
        await admin.redis.hset(record, mapping={"agent_id": AGENT_A, "text": TEXT, "rerouted": 0})
        await admin.redis.expire(record, ROUTE_RECORD_TTL_S)

        # bob's verdict on alice's task: confirmed by the broker, refused by the router
        assert await bob.feedback(done.task_id, good=False) is None
        await wait_until(lambda: consumer.refused == 1, timeout=10)
        assert consumer.applied == 0 and events == []

        # alice's own verdict is applied, and announced by the router's user
        assert await alice.feedback(done.task_id, good=True) is None
        await wait_until(lambda: consumer.applied == 1, timeout=10)
        await wait_until(lambda: len(events) == 1, timeout=5)
        [(sender, event)] = events
        assert sender == mesh_access.user(Role("router"))
        assert event.task_id == done.task_id and event.agent_id == AGENT_A
        assert event.data == {"good": True, "counted": True}

        # her verdict on a task without a routing record is counted as unknown, not applied
        assert await alice.feedback(unrouted.task_id, good=True) is None
        await wait_until(lambda: consumer.unknown == 1, timeout=10)

    memory = await ExampleMemory(admin.redis, admin.keys).load(AGENT_A)
    assert memory.texts.count(TEXT) == 1 and memory.good == 1 and memory.bad == 0
    assert consumer.refused == 1 and consumer.applied == 1 and len(events) == 1
    # alice's process never touched its Redis, and Redis refused her user nothing more
    assert spy.used == []
    assert await _acl_denials(mesh_access, alice_user) == denied_before


async def test_mesh_feedback_cli_publishes_to_the_routers_under_access_control(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    """`mesh feedback` as the owner's user: no Redis, the router applies the verdict."""
    admin = await connect(mesh_access.settings, name="test-access-feedback-admin")
    add_cleanup(admin.close)
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    router = await start_router_as(as_user, add_cleanup)
    consumer = router.feedback
    assert consumer is not None
    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), _payer(), grace_s=2))
    async with MeshClient(await as_user(Role("client", CLIENT))) as alice:
        done = await alice.request("pay", {"n": 1}, target=AGENT_A, wait_s=20)
    record = admin.keys.outcome(done.task_id)
    await admin.redis.hset(record, mapping={"agent_id": AGENT_A, "text": TEXT, "rerouted": 0})
    creds = mesh_access.creds(Role("client", CLIENT))
    env = {
        **os.environ,
        "MESH_NAMESPACE": mesh_access.scope.namespace,
        "MESH_AMQP_URL": creds.amqp_url,
        "MESH_REDIS_URL": creds.redis_url,
        "MESH_ACCESS_CONTROL": "true",
        "MESH_TOPOLOGY": "passive",
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mesh.cli.main",
        "feedback",
        done.task_id,
        "bad",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    assert "sent to the routers" in out.decode()
    await wait_until(lambda: consumer.applied == 1, timeout=10)
    memory = await ExampleMemory(admin.redis, admin.keys).load(AGENT_A)
    assert memory.bad == 1 and TEXT not in memory.texts
    assert consumer.refused == 0


async def test_a_client_whose_user_may_not_write_feedback_is_told_at_once(
    mesh_access: Provisioned, add_cleanup: Any
) -> None:
    """A client user without write on ``<ns>.feedback`` gets a `ConfigError` naming the
    fix, not a minute of retries (a refusal is no outage)."""
    user = mesh_access.user(Role("client", CLIENT))
    vhost, name = mesh_access.scope.vhost, mesh_access.topology.feedback
    current = await asyncio.to_thread(mesh_access.management.permissions, vhost, user)
    assert current is not None and str(current["write"]).startswith("^")
    await asyncio.to_thread(
        mesh_access.management.put_permissions,
        vhost,
        user,
        configure=str(current["configure"]),
        write=f"^(?!{re.escape(name)}$){str(current['write'])[1:]}",
        read=str(current["read"]),
    )
    creds = mesh_access.creds(Role("client", CLIENT))
    conn = await connect(role_settings(mesh_access, creds.amqp_url, creds.redis_url))
    add_cleanup(conn.close)
    async with MeshClient(conn) as alice:
        with pytest.raises(ConfigError, match="mesh access provision"):
            await asyncio.wait_for(alice.feedback("t1", good=True), timeout=10)
