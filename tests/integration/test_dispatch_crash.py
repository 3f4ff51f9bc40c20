"""A worker process killed with SIGKILL mid-task: the task completes exactly once."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.schemas import new_id
from tests.agents_for_tests import LeaseMembership, effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.2, lease_ttl_s=1.0, retry_delays_ms=(200, 400)
    )


async def _spawn_worker(settings: Settings, instance_id: str) -> asyncio.subprocess.Process:
    env = {
        **os.environ,
        "MESH_NAMESPACE": settings.namespace,
        "MESH_HEARTBEAT_S": str(settings.heartbeat_s),
        "MESH_LEASE_TTL_S": str(settings.lease_ttl_s),
        "MESH_RETRY_DELAYS_MS": ",".join(str(d) for d in settings.retry_delays_ms),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.agents_for_tests",
        "effect",
        instance_id,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), timeout=20)
    assert line.strip() == b"ready", line
    return proc


async def test_worker_killed_mid_task_completes_exactly_once(
    conn: MeshConnection, settings: Settings, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    victim = await _spawn_worker(settings, "effect-victim")
    add_cleanup(lambda: victim.returncode is None and victim.kill())
    async with MeshClient(conn) as client:
        task_id = new_id()
        pending = asyncio.ensure_future(
            client.request(
                "work",
                {"sleep_s": 2.0},
                target="effect",
                timeout_ms=20_000,
                wait_s=25,
                task_id=task_id,
            )
        )
        runs = conn.keys.side_effect

        # the victim has started the handler (it counts runs before sleeping)
        async def started() -> bool:
            return bool(await conn.redis.get(runs(f"runs:{task_id}")))

        await wait_until(started, timeout=10)
        victim.send_signal(signal.SIGKILL)
        await victim.wait()
        killed_at = asyncio.get_running_loop().time()
        survivor_membership = LeaseMembership(conn, "effect", "effect-survivor")
        await start_worker(
            conn,
            add_cleanup,
            effect_agent(conn),
            instance_id="effect-survivor",
            membership=survivor_membership,
        )
        result = await pending
        recovered_s = asyncio.get_running_loop().time() - killed_at
        # a later task through the same router and worker: its Result comes after any
        # second Result of the first task the survivor would have sent
        probe = await client.request("probe", target="effect", timeout_ms=10_000, wait_s=15)
    assert result.status == "completed"
    assert result.instance_id == "effect-survivor"
    assert probe.status == "completed"
    assert client.results_received == 2  # the task and the probe
    assert client.conflicting_results == 0  # a copy may come back; never a different one
    assert int(await conn.redis.get(runs(f"runs:{result.task_id}"))) == 2  # killed + rerun
    assert int(await conn.redis.get(runs(f"work:{result.task_id}"))) == 1  # applied once
    assert int(await conn.redis.get(runs("total"))) == 2  # the task once, the probe once
    history = await TaskStore(conn.redis, conn.keys, settings).history(result.task_id)
    assert [h["state"] for h in history][-4:] == [
        "processing",
        "accepted",
        "processing",
        "completed",
    ]
    assert any(h.get("note") == "takeover" for h in history)
    print(f"recovered {recovered_s:.2f}s after SIGKILL (lease_ttl_s={settings.lease_ttl_s})")
