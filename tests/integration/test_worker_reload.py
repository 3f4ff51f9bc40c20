"""`mesh worker --reload` restarts the worker with the new code when a .py file of the app
changes (watchfiles, the ``reload`` extra)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.services import start_registry
from tests.integration.dispatch_kit import start_router

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("watchfiles") is None,
        reason="watchfiles is not installed (pip install 'agent-reach-mesh[reload]')",
    ),
]

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")

AGENT = """
import mesh

agent = mesh.Agent("reloaded", "Says which version of its code runs")


@agent.handler
async def handle(task, ctx):
    return {{"version": {version}}}
"""


async def test_a_changed_module_is_served_after_the_reload(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    add_cleanup(await start_registry(conn))
    await start_router(conn, add_cleanup)
    module = tmp_path / "reloading_app.py"
    module.write_text(AGENT.format(version=1))
    env = {**os.environ, "MESH_NAMESPACE": conn.settings.namespace}
    proc = await asyncio.create_subprocess_exec(
        MESH,
        "worker",
        "reloading_app:agent",
        "--reload",
        "--grace-s",
        "1",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    add_cleanup(lambda: proc.returncode is None and proc.kill())

    async def version() -> int | None:
        async with MeshClient(conn) as client:
            result = await client.request("which", target="reloaded", wait_s=10)
        return result.output.get("version") if result.status == "completed" else None

    async def serves(wanted: int, within_s: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        seen = None
        while loop.time() < deadline:
            seen = await version()
            if seen == wanted:
                return
            await asyncio.sleep(0.2)
        raise AssertionError(f"version {wanted} not served within {within_s} s (last: {seen})")

    await serves(1, within_s=40)
    module.write_text(AGENT.format(version=2))
    await serves(2, within_s=40)
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), timeout=30)
    text = err.decode()
    assert "watching" in text and "restarting the worker" in text, text[-2000:]
