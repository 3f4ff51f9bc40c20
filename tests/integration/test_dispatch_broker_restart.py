"""A broker restart under load: everything reconnects by itself, each accepted task gets
exactly one terminal Result, and no side effect happens twice.

It restarts the real, shared broker (`rabbitmqctl stop_app` / `start_app`) and restores it
in a ``finally``.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from typing import Any

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.schemas import Result
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.exclusive]

TASKS = 60
OUTAGE_S = 3.0


async def _rabbitmqctl(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "rabbitmqctl", *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
    )
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()


@pytest.mark.skipif(shutil.which("rabbitmqctl") is None, reason="needs rabbitmqctl")
async def test_broker_restart_under_load(mesh_env: Any, add_cleanup: Any) -> None:
    router_conn: MeshConnection = await mesh_env("-router")
    worker_conn: MeshConnection = await mesh_env("-worker")
    client_conn: MeshConnection = await mesh_env("-client")
    await start_router(router_conn, add_cleanup)
    agent = effect_agent(worker_conn)
    agent.max_concurrency = 16
    await start_worker(worker_conn, add_cleanup, agent)
    client = MeshClient(client_conn)
    await client.start()
    add_cleanup(client.close)

    async def one(i: int) -> Result:
        await asyncio.sleep(i * 0.05)  # spread over the outage: before, during, after
        return await client.request(
            "work", {"n": i, "sleep_s": 0.3}, target="effect", timeout_ms=120_000, wait_s=150
        )

    pending = [asyncio.ensure_future(one(i)) for i in range(TASKS)]
    await wait_until(lambda: client.results_received >= 5, timeout=20)
    stopped = time.monotonic()
    try:
        await _rabbitmqctl("stop_app")
        await asyncio.sleep(OUTAGE_S)
    finally:
        await _rabbitmqctl("start_app")
    back = time.monotonic()
    results = await asyncio.gather(*pending)
    first_after = time.monotonic()
    # a later task through the same router and worker: once its Result is back, any second
    # Result the worker sent for an earlier task has arrived too
    probe = await client.request("work", {"n": -1}, target="effect", timeout_ms=30_000, wait_s=40)
    assert probe.status == "completed"
    assert [r.status for r in results] == ["completed"] * TASKS
    assert sorted(r.output["n"] for r in results if r.output) == list(range(TASKS))
    # Results are published at least once (a confirm lost in the outage means a resend):
    # copies may arrive, but never one that disagrees with the first
    assert client.results_received == TASKS + 1  # and the probe
    assert client.conflicting_results == 0
    redis = worker_conn.redis
    keys = worker_conn.keys
    for r in results:
        assert await redis.get(keys.side_effect(f"work:{r.task_id}")) == b"1"
    assert int(await redis.get(keys.side_effect("total"))) == TASKS + 1
    print(
        f"outage {back - stopped:.1f}s; all {TASKS} Results {first_after - back:.1f}s "
        f"after start_app; {client.duplicate_results} copies dropped"
    )
