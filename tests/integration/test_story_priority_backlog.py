"""Story: a priority backlog (seed 002 section 7.3), in both queue modes.

Strict priority starved the low band under a high-priority flood, and the quorum router
queue had no priority at all. Now the router queue and each agent queue are one queue per
band, drained by weight (`MESH_PRIORITY_WEIGHTS`, 5:3:1): a high-priority task overtakes a
backlog of low ones at the router and at the worker, and under a flood of high ones the low
band still gets its share of the slots (1 in 9).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import aio_pika
import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.router.legacy import legacy_router_queue
from mesh.router.service import RouterService
from mesh.schemas import TaskEnvelope
from mesh.topology import priority_band
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration

AGENT = "prio"


@pytest.fixture(params=["classic", "quorum"])
def settings(namespace: str, request: pytest.FixtureRequest) -> Settings:
    # a dispatch waiting in a backlog must not expire and come back (the accept timeout is
    # for agents that take no work; the backlog test of the faults issue covers that path)
    return Settings.from_env(
        namespace=namespace, queue_type=request.param, accept_timeout_ms=60_000
    )


class Recorder:
    """An agent of one slot (or `concurrency`) that records the band of each task it starts;
    a task with ``payload.block`` waits for `go`."""

    def __init__(self, concurrency: int) -> None:
        self.started: list[str] = []
        self.go = asyncio.Event()
        self.agent = Agent(
            AGENT, "Records the order it starts tasks in", max_concurrency=concurrency
        )

        @self.agent.handler
        async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
            self.started.append(
                "block" if task.payload.get("block") else priority_band(task.priority)
            )
            if task.payload.get("block"):
                await self.go.wait()
            await asyncio.sleep(float(task.payload.get("sleep_s", 0)))
            return {"n": task.payload.get("n")}


async def submit(client: MeshClient, priority: int, count: int, **payload: Any) -> None:
    await asyncio.gather(
        *(
            client.submit(
                TaskEnvelope(
                    capability="work", payload={"n": n, **payload}, target=AGENT, priority=priority
                )
            )
            for n in range(count)
        )
    )


async def test_a_high_priority_task_overtakes_a_low_priority_backlog(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    recorder = Recorder(concurrency=2)
    await start_worker(conn, add_cleanup, recorder.agent)
    async with MeshClient(conn) as client:
        await submit(client, 1, 400, sleep_s=0.02)  # a backlog of 4 s

        # the router dispatched it all: the backlog waits in the agent's low-band queue
        async def dispatched() -> bool:
            return await queued(conn, conn.topology.router_queues()) == 0

        await wait_until(dispatched, timeout=20)
        before = len(recorder.started)
        result = await client.request("urgent", target=AGENT, priority=9, wait_s=20)
        assert result.status == "completed"
        at = recorder.started.index("high")
    assert recorder.started[:at].count("low") == at
    # it came in behind a backlog of hundreds and overtook it: what started before it are
    # the lows that were running or held by the worker, or that started on its way there
    # (a few at 100 a second)
    assert 400 - before >= 150, before
    assert at - before <= 20, recorder.started[:at]


async def queued(conn: MeshConnection, queues: list[tuple[str, int]]) -> int:
    channel = await conn.channel()
    try:
        total = 0
        for name, _ in queues:
            declared = await channel.declare_queue(name, passive=True)
            total += int(declared.declaration_result.message_count or 0)
        return total
    finally:
        await channel.close()


async def test_under_a_high_priority_flood_the_low_band_gets_its_share(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    router: RouterService = await start_router(conn, add_cleanup)
    recorder = Recorder(concurrency=1)
    worker = await start_worker(conn, add_cleanup, recorder.agent)
    floods = {"high": (9, 90), "normal": (5, 54), "low": (1, 27)}
    async with MeshClient(conn) as client:
        await submit(client, 5, 1, block=True)  # holds the one slot while the flood queues
        await wait_until(lambda: recorder.started == ["block"], timeout=10)
        for priority, count in floods.values():
            await submit(client, priority, count)
        total = 1 + sum(count for _, count in floods.values())
        # every task dispatched: the backlog is in the agent's band queues
        await wait_until(lambda: router.handled >= total, timeout=20)
        recorder.go.set()
        await wait_until(lambda: worker.completed >= total, timeout=30)
    served = recorder.started[1:]
    assert Counter(served) == {band: count for band, (_, count) in floods.items()}
    # while every band waits (the first 54 slots: no band runs out before), slots go 5:3:1
    window = Counter(served[:54])
    assert 6 * 0.8 <= window["low"] <= 6 * 1.2, window
    assert 18 * 0.8 <= window["normal"] <= 18 * 1.2, window
    assert 30 * 0.8 <= window["high"] <= 30 * 1.2, window
    # strict priority would have served all 90 high first; here the first low is early
    assert served.index("low") < 9, served[:9]


async def test_a_router_queue_left_from_before_the_bands_is_reported(
    conn: MeshConnection, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """An upgrade leaves the single router queue (x-max-priority 10 in classic mode): the
    router names it, its depth and the fix, and routes on the band queues regardless."""
    topology = conn.topology
    channel = await conn.channel()
    await topology.declare(channel)
    legacy = await channel.declare_queue(
        topology.legacy_router_queue, durable=True, arguments={"x-max-priority": 10}
    )
    await legacy.bind(topology.ingress, routing_key=topology.ingress_key)  # as it was
    await (await channel.get_exchange(topology.ingress)).publish(
        aio_pika.Message(b"{}"), routing_key=topology.ingress_key
    )
    await wait_until(lambda: legacy_router_queue(conn), timeout=5)
    with caplog.at_level(logging.ERROR, logger="mesh.router.legacy"):
        await start_router(conn, add_cleanup)
    (record,) = [r for r in caplog.records if r.name == "mesh.router.legacy"]
    assert record.getMessage().startswith(
        f"queue {topology.legacy_router_queue} is left from a release before the priority "
        "bands, with 1 message(s): nobody consumes it"
    )
    assert "(README: Priorities, upgrading)" in record.getMessage()
    recorder = Recorder(concurrency=1)
    await start_worker(conn, add_cleanup, recorder.agent)
    async with MeshClient(conn) as client:
        result = await client.request("work", target=AGENT, priority=2, wait_s=20)
    assert result.status == "completed" and recorder.started == ["low"]
