"""An application's own `schemas.py` (the FastAPI habit) does not shadow the mesh's models."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

APP_SCHEMAS = """
from pydantic import BaseModel


class Refund(BaseModel):
    order_id: str
"""

APP_TEST = """
from mesh import Agent
from mesh.testing import AgentHarness

from schemas import Refund

refunds = Agent("shop.refunds", "refund an order", input_model=Refund)


@refunds.handler
async def handle(task, ctx):
    return {"refunded": task.payload["order_id"]}


async def test_refund() -> None:
    result = await AgentHarness(refunds).run({"order_id": "42"})
    assert result.status == "completed" and result.output == {"refunded": "42"}
"""


def test_import_mesh_and_the_harness_beside_an_own_schemas_module(tmp_path: Path) -> None:
    (tmp_path / "schemas.py").write_text(APP_SCHEMAS)
    (tmp_path / "test_app.py").write_text(APP_TEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    probe = subprocess.run(
        [sys.executable, "-c", "import schemas, mesh; print(schemas.Refund.__name__, mesh.Agent)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.startswith("Refund <class 'mesh.worker.agent.Agent'>")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
