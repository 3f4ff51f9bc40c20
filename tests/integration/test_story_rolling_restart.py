"""Story: restarts and deploys lose nothing.

Every instance of an agent is restarted, one after the other, and then its only instance
is stopped and started again, while tasks arrive open loop at 20 a second (half with a
target, half routed semantically). A task that arrives while the agent has no live
instance waits in the agent's queue (the agent is awaited: its last lease ended within
``MESH_AGENT_RETURN_WINDOW_S``), a task in flight on a stopping instance is finished within
the grace or handed back to the agent's own queue: every task gets exactly one completed
Result, none ``unroutable``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.access.roles import Role
from mesh.schemas import Result, TaskEnvelope
from mesh.services import Stop, start_worker
from tests.conftest import ROUTABLE_S
from tests.integration.routing_kit import SemanticMesh

pytestmark = pytest.mark.integration

AGENT = "restart.refunds"
#: the open-loop rate and how long the load lasts
RATE = 20.0
LOAD_S = 14.0
#: each task's handler time
WORK_S = 0.2


def refunds(runs: Counter[str]) -> Agent:
    agent = Agent(
        AGENT,
        "Refunds customer orders: gives the money back for an order",
        examples=["refund order 12", "I want my money back for order 7"],
        max_concurrency=4,
    )

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        runs[task.task_id] += 1
        await asyncio.sleep(WORK_S)
        return {"order": task.payload["order"], "by": ctx.instance_id}

    return agent


async def _load(client: MeshClient) -> list[tuple[float, Result]]:
    """Open loop: a request every 1/RATE s whatever the answers; (latency, Result) each."""

    async def one(n: int) -> tuple[float, Result]:
        started = time.monotonic()
        target = AGENT if n % 2 else None
        result = await client.request(
            f"refund order {n} please",
            {"order": n},
            target=target,
            task_id=f"roll-{n}",
            timeout_ms=60_000,
            wait_s=90,
        )
        return time.monotonic() - started, result

    tasks = []
    begin = time.monotonic()
    for n in range(int(RATE * LOAD_S)):
        await asyncio.sleep(max(0.0, begin + n / RATE - time.monotonic()))
        tasks.append(asyncio.create_task(one(n)))
    return await asyncio.gather(*tasks)


async def test_a_rolling_restart_and_a_stop_start_lose_nothing(mesh: SemanticMesh) -> None:
    runs: Counter[str] = Counter()
    agent = refunds(runs)
    await mesh.start()
    conn = mesh.conn
    worker_conn = await mesh.connection_of(Role("worker", AGENT))
    stops: dict[str, Stop] = {}

    async def up(instance_id: str) -> None:
        stops[instance_id] = await start_worker(
            worker_conn, agent, instance_id=instance_id, grace_s=0.3
        )

    async def down(instance_id: str) -> None:
        await stops.pop(instance_id)()

    await up(f"{AGENT}-a1")
    await up(f"{AGENT}-b1")
    assert mesh.selector is not None
    await mesh.selector.wait_routable([AGENT], timeout=ROUTABLE_S)

    async def restarts() -> None:
        await asyncio.sleep(2.0)
        await down(f"{AGENT}-a1")  # rolling: one instance after the other
        await up(f"{AGENT}-a2")
        await asyncio.sleep(2.0)
        await down(f"{AGENT}-b1")
        await up(f"{AGENT}-b2")
        await asyncio.sleep(2.0)
        await down(f"{AGENT}-a2")  # then the agent's only instance, stopped...
        await down(f"{AGENT}-b2")
        await asyncio.sleep(3.0)  # no instance at all for 3 s
        await up(f"{AGENT}-a3")  # ...and started again

    try:
        async with MeshClient(conn) as client:
            restarting = asyncio.create_task(restarts())
            answered = await _load(client)
            await restarting
            duplicates = client.duplicate_results
    finally:
        for stop in list(stops.values()):
            await stop()

    sent = int(RATE * LOAD_S)
    statuses = Counter(r.status for _, r in answered)
    waited = [took for took, r in answered if r.route is not None and r.route.waiting_for_instance]
    print(
        f"\nrolling restart: sent={sent} completed={statuses['completed']} "
        f"unroutable={statuses['unroutable']} other={dict(statuses)} waited={len(waited)} "
        f"max_latency_s={max(t for t, _ in answered):.2f} "
        f"max_waited_s={max(waited, default=0.0):.2f} reran={sum(n > 1 for n in runs.values())}"
    )  # the README's figures (pytest -s)
    assert statuses == Counter({"completed": sent}), [
        (r.task_id, r.status, r.error) for _, r in answered if r.status != "completed"
    ]
    assert sorted(r.task_id for _, r in answered) == sorted(f"roll-{n}" for n in range(sent))
    assert duplicates == 0
    # the 3 s with no instance: tasks routed then waited for it, and were told so
    assert waited, "no task waited for an instance"
    assert {r.output["order"] for _, r in answered if r.output} == set(range(sent))
