"""`mesh worker MODULE:*` hosts several agents in one process, next to `mesh registry`
and `mesh router` processes; a bad spec ends it with one sentence and exit code 1."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.registry.state import load_state
from mesh.router_watch import RouterWatch
from mesh.schemas import now_ms
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")

AGENTS_MODULE = textwrap.dedent(
    '''
    """Two agents for `mesh worker my_agents:*`."""
    from mesh import Agent

    echo = Agent("cli.echo", "Repeats what it is told.")
    shout = Agent("cli.shout", "Says what it is told in capitals.")


    @echo.handler
    async def _echo(task, ctx):
        return {"said": task.capability}


    @shout.handler
    async def _shout(task, ctx):
        return {"said": task.capability.upper()}
    '''
)


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    (tmp_path / "my_agents.py").write_text(AGENTS_MODULE)
    return tmp_path


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Started processes; at teardown: SIGTERM, wait, and kill what is left."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _spawn(
    procs: list[subprocess.Popen[bytes]], args: list[str], cwd: Path, namespace: str, log: Path
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MESH_NAMESPACE": namespace}
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [MESH, *args], cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=err
        )
    procs.append(proc)
    return proc


async def _live(conn: MeshConnection, agent_ids: set[str]) -> bool:
    state = await load_state(conn.redis, conn.keys)
    now = now_ms()
    return all(a in state and state[a].is_live(now) for a in agent_ids)


@pytest.mark.slow
async def test_worker_hosts_every_agent_of_a_module(
    conn: MeshConnection,
    agent_dir: Path,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    ns = conn.settings.namespace
    _spawn(processes, ["registry"], ROOT, ns, tmp_path / "registry.err")
    _spawn(processes, ["router"], ROOT, ns, tmp_path / "router.err")
    worker = _spawn(processes, ["worker", "my_agents:*"], agent_dir, ns, tmp_path / "worker.err")
    await wait_until(lambda: _live(conn, {"cli.echo", "cli.shout"}), timeout=60, interval=0.2)
    # a request with no router consuming fails within a second (`mesh.NoRouter`): wait for it
    watch = RouterWatch(conn)
    await wait_until(lambda: watch.routers(fresh=True), timeout=60, interval=0.2)
    await watch.close()
    async with MeshClient(conn) as client:
        echo = await client.request("hello", target="cli.echo", wait_s=60)
        shout = await client.request("hello", target="cli.shout", wait_s=60)
    assert (echo.status, echo.agent_id, echo.output) == ("completed", "cli.echo", {"said": "hello"})
    assert (shout.status, shout.output) == ("completed", {"said": "HELLO"})
    for p in processes:
        p.send_signal(signal.SIGTERM)
    for p in processes:
        assert p.wait(timeout=40) == 0, (tmp_path / "worker.err").read_text()
    assert worker.returncode == 0


def test_worker_with_an_unknown_module_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [MESH, "worker", "nosuchmodule:x"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MESH_NAMESPACE": "test-nosuch"},
    )
    assert done.returncode == 2  # a usage error: the spec names it
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mesh: cannot import 'nosuchmodule'"), lines


def test_instance_id_needs_exactly_one_agent(agent_dir: Path) -> None:
    done = subprocess.run(
        [MESH, "worker", "my_agents:*", "--instance-id", "x"],
        cwd=agent_dir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "mesh: --instance-id needs exactly one agent, but my_agents:* names 2"
    ]
