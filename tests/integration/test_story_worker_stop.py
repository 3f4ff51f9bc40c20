"""Story: a worker stops with a task in flight (a deploy), for real: `mesh worker` processes
and SIGINT.

With ``--grace-s 2`` and a 10 s task, the worker says it is draining, waits 2 s, hands the
task back to its own agent's queue (not to a router, which would exclude the agent), says
so, and exits 0. A new worker takes the task and completes it: the caller gets exactly one
Result, ``completed``. A second Ctrl-C ends the grace at once, handing the task back too.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh import MeshClient
from mesh.access.roles import Role
from mesh.connection import MeshConnection
from mesh.registry.state import load_state
from mesh.schemas import now_ms
from tests import access_mode
from tests.conftest import wait_until
from tests.integration.routing_kit import SemanticMesh

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
AGENT = "deploy.reports"

#: the first run of a task takes 10 s (it writes ``<task_id>.started`` first); later runs
#: are quick, so the test does not wait another 10 s for the restarted worker
AGENTS_MODULE = textwrap.dedent(
    f"""
    import asyncio
    from pathlib import Path

    from mesh import Agent

    reports = Agent({AGENT!r}, "Writes long reports")


    @reports.handler
    async def write(task, ctx):
        marker = Path(task.payload["dir"]) / f"{{task.task_id}}.started"
        first = not marker.exists()
        marker.write_text(ctx.instance_id)
        await asyncio.sleep(10 if first else 0.2)
        return {{"by": ctx.instance_id, "first_run": first}}
    """
)


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    (tmp_path / "deploy_agents.py").write_text(AGENTS_MODULE)
    return tmp_path


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


async def _access_env(conn: MeshConnection) -> dict[str, str]:
    """The worker processes' login in the access-control mode (`tests.access_mode`): the
    agent's own worker user, access control on, the topology the admin declared."""
    mode = access_mode.of(conn)
    if mode is None:
        return {}
    await mode.declare(conn, AGENT)
    settings = await mode.settings_of(Role("worker", AGENT))
    return {
        "MESH_AMQP_URL": settings.amqp_url.get_secret_value(),
        "MESH_REDIS_URL": settings.redis_url.get_secret_value(),
        "MESH_ACCESS_CONTROL": "true",
        "MESH_TOPOLOGY": "passive",
    }


def _worker(
    procs: list[subprocess.Popen[bytes]],
    conn: MeshConnection,
    cwd: Path,
    access: dict[str, str],
    *args: str,
) -> tuple[subprocess.Popen[bytes], Path]:
    log = cwd / f"worker-{len(procs)}.err"
    env = {
        **os.environ,
        "MESH_NAMESPACE": conn.settings.namespace,
        "MESH_HEARTBEAT_S": "0.5",
        "MESH_LEASE_TTL_S": "1.5",
        **access,
    }
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [MESH, "worker", "deploy_agents:reports", *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    procs.append(proc)
    return proc, log


async def _live_instances(conn: MeshConnection) -> int:
    state = await load_state(conn.redis, conn.keys)
    agent = state.get(AGENT)
    return 0 if agent is None else len(agent.live_instances(now_ms()))


async def _exit_code(proc: subprocess.Popen[bytes], timeout: float) -> int:
    return await asyncio.to_thread(proc.wait, timeout)


@pytest.mark.parametrize("second_sigint", [False, True], ids=["grace", "second-sigint"])
async def test_a_stopping_worker_hands_its_task_back_and_a_new_one_completes_it(
    mesh: SemanticMesh,
    agent_dir: Path,
    processes: list[subprocess.Popen[bytes]],
    second_sigint: bool,
) -> None:
    conn = mesh.conn
    await mesh.start()
    grace_s = 30.0 if second_sigint else 2.0
    access = await _access_env(conn)
    first, first_log = _worker(processes, conn, agent_dir, access, "--grace-s", str(grace_s))
    await wait_until(lambda: _live_instances(conn), timeout=60, interval=0.2)
    async with MeshClient(conn) as client:
        request = asyncio.create_task(
            client.request(
                "write the quarterly report",
                {"dir": str(agent_dir)},
                target=AGENT,
                task_id="deploy-1",
                timeout_ms=60_000,
                wait_s=90,
            )
        )
        marker = agent_dir / "deploy-1.started"
        await wait_until(marker.exists, timeout=30, interval=0.05)
        first.send_signal(signal.SIGINT)
        signalled = time.monotonic()
        if second_sigint:
            await asyncio.sleep(0.5)
            first.send_signal(signal.SIGINT)
        assert await _exit_code(first, timeout=20) == 0
        took = time.monotonic() - signalled
        log = first_log.read_text()
        print(f"\nworker stop ({'second SIGINT' if second_sigint else 'grace 2 s'}): {took:.2f} s")
        if second_sigint:
            assert took < 5.0, (took, log)  # not the 30 s grace
            assert "stopping at once; handing 1 task(s) back" in log, log
        else:
            assert 2.0 <= took < 8.0, (took, log)  # the grace, then the hand-back and goodbye
        assert f"draining: 1 task(s) in flight, waiting up to {grace_s:g} s" in log, log
        assert f"1 task(s) handed back to agent {AGENT}'s queue" in log, log
        assert not request.done()  # the caller still waits: nothing ended the task
        _second, _ = _worker(processes, conn, agent_dir, access)
        result = await request
        assert client.results_received == 1 and client.duplicate_results == 0
    assert result.status == "completed", result.error
    assert result.output is not None and result.output["first_run"] is False
