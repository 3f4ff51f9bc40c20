"""queue_type="quorum": priority bands per agent, the worker drains all three."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mesh import MeshClient
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
