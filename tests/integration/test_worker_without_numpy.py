"""A worker-only install has no numpy (it is in the `router` extra): `import mesh` and a
running worker load neither numpy nor any `mesh.router` module, and `mesh worker` works.

The worker processes run with numpy blocked (an import hook that raises ImportError, as a
missing package does) against the real broker and Redis; the router and registry run in
the test's process, and a targeted task goes through the worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.services import start_registry
from tests.integration.dispatch_kit import start_router
from tests.no_numpy import BLOCK_NUMPY

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")

WORKER = (
    BLOCK_NUMPY
    + """
import asyncio

import mesh
from mesh.services import start_worker


def loaded():
    return sorted(m for m in sys.modules if m == "numpy" or m.split(".")[:2] == ["mesh", "router"])


agent = mesh.Agent("lean", "Answers without numpy")


@agent.handler
async def handle(task, ctx):
    return {"n": task.payload["n"], "loaded": loaded()}


async def main():
    async with await mesh.connect(mesh.Settings.from_env(), name="lean-worker") as conn:
        stop = await start_worker(conn, agent, grace_s=1)
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        await stop()
    print(json.dumps(loaded()), flush=True)


import json

asyncio.run(main())
"""
)

AGENT_MODULE = """
import mesh

lean = mesh.Agent("lean", "Answers without numpy")


@lean.handler
async def handle(task, ctx):
    return {"n": task.payload["n"]}
"""


def _env(conn: MeshConnection, *path: Path) -> dict[str, str]:
    pythonpath = [str(p) for p in path] + [str(ROOT)]
    return {
        **os.environ,
        "MESH_NAMESPACE": conn.settings.namespace,
        "PYTHONPATH": os.pathsep.join(pythonpath),
    }


async def _mesh_for_lean(conn: MeshConnection, add_cleanup: Any) -> None:
    add_cleanup(await start_registry(conn))
    await start_router(conn, add_cleanup)


async def _ask(conn: MeshConnection, n: int) -> dict[str, Any]:
    async with MeshClient(conn) as client:
        result = await client.request("answer", {"n": n}, target="lean", wait_s=20)
    assert result.status == "completed", result
    output: dict[str, Any] = result.output
    return output


async def _ready(proc: asyncio.subprocess.Process, word: bytes = b"ready") -> None:
    assert proc.stdout is not None and proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
    except TimeoutError:
        proc.kill()
        raise
    if word not in line:
        err = await proc.stderr.read()
        raise AssertionError(f"worker did not start: {line!r} {err.decode()[-2000:]}")


async def test_a_worker_imports_neither_numpy_nor_the_router(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    await _mesh_for_lean(conn, add_cleanup)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WORKER,
        cwd=tmp_path,
        env=_env(conn),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    add_cleanup(lambda: proc.returncode is None and proc.kill())
    await _ready(proc)
    output = await _ask(conn, 7)
    assert output == {"n": 7, "loaded": []}
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"stop\n")
    await proc.stdin.drain()
    out, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode == 0, err.decode()[-2000:]
    assert json.loads(out.decode().splitlines()[-1]) == []


async def test_mesh_worker_runs_without_numpy(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    await _mesh_for_lean(conn, add_cleanup)
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_NUMPY)
    app = tmp_path / "app"
    app.mkdir()
    (app / "lean_agents.py").write_text(AGENT_MODULE)
    env = _env(conn, site)
    check = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import numpy", env=env, stderr=asyncio.subprocess.PIPE
    )
    _, err = await check.communicate()
    assert check.returncode == 1 and b"blocked" in err  # the block is in force
    proc = await asyncio.create_subprocess_exec(
        MESH,
        "worker",
        "lean_agents:lean",
        "--grace-s",
        "1",
        cwd=app,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    add_cleanup(lambda: proc.returncode is None and proc.kill())
    await _ready(proc, b"running")  # "mesh-worker-lean running (...)"
    assert await _ask(conn, 3) == {"n": 3}
    proc.send_signal(2)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    assert proc.returncode in (0, 130), err.decode()[-2000:]
    assert b"numpy" not in err, err.decode()[-2000:]
