"""SIGKILL under load, the way a user runs the mesh: `mesh registry`, `mesh router` and
`mesh worker` as separate processes, two of each; a router, a registry and a worker are
killed while tasks arrive on a schedule. Every task gets exactly one terminal Result and
its payment (guarded by `apply_once`) is applied exactly once (faults issue, short version
of the router, registry and worker kills)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import textwrap
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.management import Management
from mesh.registry.state import load_state
from mesh.schemas import Result, TaskEnvelope, now_ms
from tests.conftest import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
RATE_PER_S = 30
SECONDS = 8

AGENT_MODULE = textwrap.dedent(
    """
    import asyncio
    from mesh import Agent

    pay = Agent("fault.pay", "Pays once per task.", max_concurrency=8)


    @pay.handler
    async def _pay(task, ctx):
        await asyncio.sleep(0.1)
        await ctx.apply_once("pay:" + task.task_id)
        await asyncio.sleep(0.05)
        return {"n": task.payload["n"]}
    """
)


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5)


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs.values():
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def test_killing_a_router_a_registry_and_a_worker_under_load_loses_nothing(
    conn: MeshConnection,
    settings: Settings,
    tmp_path: Path,
    processes: dict[str, subprocess.Popen[bytes]],
) -> None:
    (tmp_path / "pay_agents.py").write_text(AGENT_MODULE)
    env = {
        **os.environ,
        "MESH_NAMESPACE": settings.namespace,
        "MESH_HEARTBEAT_S": "0.5",
        "MESH_LEASE_TTL_S": "1.5",
    }

    def start(name: str, *args: str) -> None:
        with (tmp_path / f"{name}.err").open("ab") as err:
            processes[name] = subprocess.Popen(
                [MESH, *args], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=err
            )

    for name in ("registry-a", "registry-b"):
        start(name, "registry")
    for name in ("router-a", "router-b"):
        start(name, "router")
    for name in ("worker-a", "worker-b"):
        start(name, "worker", "pay_agents:pay")
    management = Management(settings)

    async def ready() -> bool:
        state = await load_state(conn.redis, conn.keys)
        agent = state.get("fault.pay")
        if agent is None or len(agent.live_instances(now_ms())) < 2:
            return False
        queue = await asyncio.to_thread(management.queue, conn.topology.router_queue)
        return bool(queue.get("consumers", 0) == 2)

    await wait_until(ready, timeout=90, interval=0.25)

    def kill(name: str) -> None:
        processes[name].send_signal(signal.SIGKILL)
        processes[name].wait()

    kills = {2 * RATE_PER_S: "router-a", 3 * RATE_PER_S: "registry-a", 5 * RATE_PER_S: "worker-a"}

    async def submit(client: MeshClient, i: int) -> Result:
        await asyncio.sleep(i / RATE_PER_S)  # open loop: arrivals on a schedule
        if i in kills:
            kill(kills[i])
            if kills[i] == "worker-a":
                start("worker-a2", "worker", "pay_agents:pay")
        envelope = TaskEnvelope(capability="pay", target="fault.pay", payload={"n": i})
        return await client.send(envelope, wait_s=60)

    total = RATE_PER_S * SECONDS
    async with MeshClient(conn) as client:
        results = await asyncio.gather(*(submit(client, i) for i in range(total)))
        assert client.conflicting_results == 0
    statuses = Counter(r.status for r in results)
    assert len({r.task_id for r in results}) == total
    assert statuses == Counter({"completed": total}), (statuses, _errors(results))
    for r in results:
        applied = await conn.redis.get(conn.keys.side_effect(f"pay:{r.task_id}"))
        assert int(applied or 0) == 1, (r.task_id, applied)
    by_instance = Counter(r.instance_id for r in results)
    print(f"{total} tasks, kills {sorted(kills.values())}: {dict(by_instance)}")


def _errors(results: list[Result]) -> Counter[str]:
    return Counter(r.error.code for r in results if r.error is not None)
