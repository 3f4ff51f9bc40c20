"""queue_type="quorum": priority bands per agent, the worker drains all three."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.exceptions

from mesh import Agent, MeshClient, Reject, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.schemas import TaskEnvelope, decode
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import drain_queue, start_router, start_worker

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(namespace=namespace, queue_type="quorum")


async def test_quorum_bands_round_trip(conn: MeshConnection, add_cleanup: Any) -> None:
    await start_router(conn, add_cleanup)
    worker = await start_worker(conn, add_cleanup, effect_agent(conn))
    assert worker._bands is not None and len(worker._bands.subscribers) == 3
    async with MeshClient(conn) as client:
        results = await asyncio.gather(
            *(
                client.request("do", {"n": p}, target="effect", priority=p, wait_s=20)
                for p in (1, 5, 9)
            )
        )
    assert [r.status for r in results] == ["completed"] * 3
    assert worker.executed == 3


async def test_poison_message_ends_through_the_delivery_limit(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """A task that kills every consumer it reaches is dead-lettered by RabbitMQ after
    `delivery_limit` deliveries, comes back to the router, and ends unroutable: answered,
    in `mesh.dead.unroutable`, never looping."""
    await start_router(conn, add_cleanup)
    topology = conn.topology
    channel = await conn.channel(prefetch=1)
    add_cleanup(channel.close)
    await topology.declare(channel, topology.agent_spec("poison"))
    queue = await channel.get_queue(topology.agent_queue("poison", "normal"))
    deliveries = 0

    async def crash(message: Any) -> None:  # a consumer that dies on it, again and again
        nonlocal deliveries
        deliveries += 1
        await message.nack(requeue=True)

    await queue.consume(crash)
    async with MeshClient(conn) as client:
        result = await client.request("do", target="poison", wait_s=30, timeout_ms=60_000)
    assert result.status == "unroutable"
    assert deliveries == conn.settings.delivery_limit + 1
    dead = await drain_queue(conn, topology.dead_queue("unroutable"))
    assert [decode(TaskEnvelope, m.body).task_id for m in dead] == [result.task_id]


async def test_a_task_held_by_an_outage_past_the_delivery_limit_is_ended_not_dropped(
    conn: MeshConnection, add_cleanup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every try of the router meets an outage (Redis away, injected), so each delivery is
    held, then requeued, which a quorum queue counts; the last delivery the limit allows
    is not routed but ended: `failed` / `delivery_limit`, answered, in ``dead.retries``.
    Without this, RabbitMQ drops the message on its next return (no dead-letter route)."""
    router = await start_router(conn, add_cleanup)
    router.outage_hold_s = 0.05
    tries: list[bool] = []

    async def away(delivery: Any, *, charge: bool = True) -> None:
        tries.append(delivery.redelivered)
        raise redis.exceptions.ConnectionError("Redis is away (injected)")

    monkeypatch.setattr(router, "route", away)
    limit = conn.settings.delivery_limit
    async with MeshClient(conn) as client:
        result = await client.request("do", target="effect", wait_s=30, timeout_ms=60_000)
    assert result.status == "failed", result
    assert result.error is not None and result.error.code == "delivery_limit"
    assert result.error.details == {"deliveries": limit}
    intake = router._intake_sub
    assert intake is not None
    # deliveries 0 .. limit - 1 were tried (held, requeued); the last one was not tried
    assert sum(s.delivered for s in intake.subscribers) == limit + 1
    assert tries[0] is False and len(tries) >= limit and all(tries[1:])
    dead = await drain_queue(conn, conn.topology.dead_queue("retries"))
    assert [decode(TaskEnvelope, m.body).task_id for m in dead] == [result.task_id]


async def test_a_dispatch_back_from_its_agent_held_past_the_delivery_limit_is_answered(
    conn: MeshConnection, add_cleanup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A task its agent rejected comes back to the router queue from the agent's queue,
    sent by the router that dispatched it; every try to route it again meets an outage,
    so its last delivery is ended. It is judged as a return (under access control its
    sender is a router, not the caller whose reply queue it names): the caller is answered
    `failed` / `delivery_limit` instead of waiting for its timeout."""
    router = await start_router(conn, add_cleanup)
    router.outage_hold_s = 0.05
    refuser = Agent("refuser", "Refuses every task")

    @refuser.handler
    async def refuse(task: TaskEnvelope, ctx: TaskContext) -> None:
        raise Reject("not mine")

    await start_worker(conn, add_cleanup, refuser)
    route = router.route
    returns: list[bool] = []

    async def away_for_returns(delivery: Any, *, charge: bool = True) -> None:
        if "x-death" not in delivery.headers:
            await route(delivery, charge=charge)  # the first dispatch goes through
            return
        returns.append(delivery.redelivered)
        raise redis.exceptions.ConnectionError("Redis is away (injected)")

    monkeypatch.setattr(router, "route", away_for_returns)
    async with MeshClient(conn) as client:
        result = await client.request("do", target="refuser", wait_s=30, timeout_ms=60_000)
    assert result.status == "failed", result
    assert result.error is not None and result.error.code == "delivery_limit"
    assert result.error.details is not None
    assert result.error.details["deliveries"] == conn.settings.delivery_limit
    assert returns and returns[0] is False and all(returns[1:])  # held, then redelivered
    dead = await drain_queue(conn, conn.topology.dead_queue("retries"))
    assert [decode(TaskEnvelope, m.body).task_id for m in dead] == [result.task_id]
