"""`mesh task TASK_ID` shows the state history with times."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mesh import MeshClient
from mesh.cli.main import main
from mesh.connection import MeshConnection
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration


async def test_mesh_task_prints_the_history(
    conn: MeshConnection,
    add_cleanup: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        result = await client.request("do", target="effect", wait_s=10)
    monkeypatch.setenv("MESH_NAMESPACE", conn.settings.namespace)
    code = await asyncio.to_thread(main, ["task", result.task_id])
    out = capsys.readouterr().out
    assert code == 0
    for state in ("submitted", "routing", "dispatched", "accepted", "processing", "completed"):
        assert f" {state} " in out
    assert "result: completed" in out and " ms " in out
