"""MESH_TOPOLOGY=passive: the admin applies the topology once (`mesh topology apply`), the
other processes only check it, and a missing object is named with the command that
creates it (identity issue, point 2)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.config import Settings
from mesh.connection import connect
from mesh.errors import ConfigError
from mesh.router.service import RouterService
from mesh.schemas import TaskEnvelope
from mesh.worker.runtime import WorkerRuntime
from tests.conftest import purge

pytestmark = pytest.mark.integration

MESH = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mesh")


async def _mesh(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run, [MESH, *args], cwd=cwd, env=env, capture_output=True, text=True
    )


def _echo() -> Agent:
    agent = Agent("passive.echo", "echoes")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"echo": task.payload}

    return agent


async def test_passive_components_check_the_topology_the_admin_applied(
    namespace: str, tmp_path: Path, add_cleanup: Any
) -> None:
    settings = Settings.from_env(namespace=namespace, topology="passive")
    add_cleanup(lambda: purge(settings))
    conn = await connect(settings, name="passive")
    add_cleanup(conn.close)

    router = RouterService(conn)
    with pytest.raises(ConfigError) as missing:
        await router.start()
    message = str(missing.value)
    assert f"{namespace}." in message and "MESH_TOPOLOGY=passive" in message
    assert f"MESH_NAMESPACE={namespace} mesh topology apply" in message
    await router.close()

    # the admin, from a fresh folder, the way an operator runs it
    env = {**os.environ, "MESH_NAMESPACE": namespace}
    done = await _mesh(tmp_path, env, "topology", "apply")
    assert done.returncode == 0, done.stderr
    router = RouterService(conn)
    await router.start()
    add_cleanup(router.close)

    worker = WorkerRuntime(_echo(), conn, grace_s=2)
    with pytest.raises(ConfigError, match=r"mesh topology apply --agent passive\.echo"):
        await worker.start()
    await worker.drain(0)
    done = await _mesh(tmp_path, env, "topology", "apply", "--agent", "passive.echo")
    assert done.returncode == 0, done.stderr
    async with (
        WorkerRuntime(_echo(), conn, grace_s=2),
        MeshClient(conn) as client,
    ):
        result = await client.request("echo", {"n": 1}, target="passive.echo", wait_s=15)
    assert result.status == "completed" and result.output == {"echo": {"n": 1}}


def test_a_bad_agent_id_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run(
        [MESH, "topology", "apply", "--agent", "no spaces"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == "mesh: --agent 'no spaces' is not an agent id"
