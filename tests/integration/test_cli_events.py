"""`mesh events` tails the events exchange: run from a fresh folder, it prints the
``route.decision`` of a task routed meanwhile and stops after ``--count``."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from mesh import MeshClient
from mesh.cli.events import line
from mesh.connection import MeshConnection
from mesh.schemas import Event
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration

MESH = str(Path(__file__).resolve().parents[2] / ".venv" / "bin" / "mesh")


async def test_mesh_events_prints_a_decision(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    env = {**os.environ, "MESH_NAMESPACE": conn.settings.namespace}
    proc = await asyncio.create_subprocess_exec(
        MESH,
        "events",
        "--filter",
        "route.decision",
        "--count",
        "1",
        "--json",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    add_cleanup(lambda: proc.returncode is None and proc.kill())
    assert proc.stderr is not None and proc.stdout is not None
    ready = await asyncio.wait_for(proc.stderr.readline(), timeout=30)
    assert b"following" in ready, ready
    async with MeshClient(conn) as client:
        result = await client.request("do", {"n": 1}, target="effect", wait_s=15)
    out = await asyncio.wait_for(proc.stdout.readline(), timeout=15)
    assert await asyncio.wait_for(proc.wait(), timeout=15) == 0
    event = json.loads(out)
    assert event["type"] == "route.decision" and event["task_id"] == result.task_id


def test_a_line_names_the_task_agent_and_route() -> None:
    event = Event(
        type="route.decision",
        task_id="t1",
        agent_id="pay",
        data={"route": {"strategy": "semantic", "score": 0.91}},
    )
    text = line(event, "mesh:router")
    assert "route.decision task=t1 agent=pay strategy=semantic score=0.91 by=mesh:router" in text
