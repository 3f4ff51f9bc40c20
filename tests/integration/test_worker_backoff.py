"""Requeues back off, and quorum bands get the agent's whole concurrency (faults issue,
point 4): a lapsed lease or a Redis outage does not turn a worker into a redelivery storm."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.config import Settings
from mesh.connection import connect
from mesh.registry.session import RegistrySession
from mesh.schemas import TaskEnvelope, now_ms
from mesh.services import start_registry
from mesh.worker.runtime import WorkerRuntime
from tests.conftest import purge, wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration


def _sleeper(running: list[int], peak: list[int]) -> Agent:
    agent = Agent("slow", "sleeps", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        try:
            await asyncio.sleep(0.3)
        finally:
            running[0] -= 1
        return {"n": task.payload["n"]}

    return agent


async def test_a_quorum_band_runs_the_agents_whole_concurrency(
    namespace: str, add_cleanup: Any
) -> None:
    settings = Settings.from_env(namespace=namespace, queue_type="quorum")
    conn = await connect(settings, name="bands")
    add_cleanup(lambda: purge(settings))
    add_cleanup(conn.close)
    await start_router(conn, add_cleanup)
    running, peak = [0], [0]
    await start_worker(conn, add_cleanup, _sleeper(running, peak))
    async with MeshClient(conn) as client:
        results = await asyncio.gather(
            *(client.request("s", {"n": i}, target="slow", wait_s=20) for i in range(12))
        )
    assert all(r.status == "completed" for r in results)
    # 12 default-priority tasks, 4 slots: before, the normal band prefetched 1 (4 x 3/9)
    assert peak[0] == 4


async def test_a_lapsed_lease_while_no_registry_answers_does_not_storm(
    namespace: str, add_cleanup: Any
) -> None:
    settings = Settings.from_env(namespace=namespace, heartbeat_s=0.3, lease_ttl_s=1.0)
    conn = await connect(settings, name="backoff")
    add_cleanup(lambda: purge(settings))
    add_cleanup(conn.close)
    stop_registry = await start_registry(conn)
    await start_router(conn, add_cleanup)
    running, peak = [0], [0]
    agent = _sleeper(running, peak)
    session = RegistrySession(conn, agent.registration("slow-1"))
    worker = WorkerRuntime(agent, conn, instance_id="slow-1", membership=session, grace_s=2)
    await worker.start()
    add_cleanup(lambda: worker.drain(grace_s=2))
    await stop_registry()  # no registry: heartbeats go unanswered, the lease lapses

    async def lapsed() -> bool:
        exp = await conn.redis.hget(conn.keys.instance("slow-1"), "lease_expires_ms")
        return exp is not None and int(exp) < now_ms()

    await wait_until(lapsed, timeout=5)
    async with MeshClient(conn) as client:
        sent = [
            asyncio.create_task(client.request("s", {"n": i}, target="slow", wait_s=30))
            for i in range(5)
        ]
        window_s = 4.0
        start = time.monotonic()
        await asyncio.sleep(window_s)  # the measured window itself, not a synchronisation
        storm = worker.deliveries
        # each task waits a lease for the re-registration, then comes back a third of a
        # lease later: a few deliveries per task, where an immediate requeue made thousands
        assert storm <= 5 * (window_s / (settings.lease_ttl_s / 3) + 1), storm
        add_cleanup(await start_registry(conn))  # a registry again: everything completes
        results = await asyncio.gather(*sent)
    assert [r.status for r in results] == ["completed"] * 5
    assert session.registrations >= 2
    print(
        f"{storm} deliveries of 5 tasks in {window_s}s without a registry "
        f"({time.monotonic() - start:.1f}s to complete)"
    )
