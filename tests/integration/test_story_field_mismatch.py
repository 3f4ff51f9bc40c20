"""The field mismatch (seed 000 section 2.3): agent A sends ``order_id``, B expects ``order_no``.

B declares its contract (`Agent(input_model=...)`): a targeted task or a handoff whose
payload does not fit is refused by the router before it is dispatched, and a payload that
reaches B's queue another way is refused by B's worker before the handler runs; both
answer ``bad_payload`` naming each bad field, and the handler never sees it. An output
that breaks B's output contract fails ``bad_handler_output``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from mesh import Agent, MeshClient, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.schemas import TaskEnvelope
from mesh.testing import AgentHarness
from tests.integration.dispatch_kit import start_router, start_worker
from tests.integration.routing_kit import SemanticMesh

pytestmark = pytest.mark.integration


class OrderLookup(BaseModel):
    model_config = ConfigDict(extra="forbid")
    order_no: str


class OrderState(BaseModel):
    state: str


def order_agent(seen: list[dict[str, Any]]) -> Agent:
    agent = Agent(
        "orders",
        "Looks orders up by their number",
        input_model=OrderLookup,
        output_model=OrderState,
    )

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        seen.append(task.payload)
        if task.payload["order_no"] == "broken":
            return {"status": "shipped"}  # not what its contract promises
        return {"state": "shipped"}

    return agent


async def test_field_mismatch_the_router_refuses_a_payload_the_target_cannot_take(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    seen: list[dict[str, Any]] = []
    await mesh.start(order_agent(seen))
    async with MeshClient(conn) as client:
        wrong = await client.request("where is order 42", {"order_id": "42"}, target="orders")
        assert wrong.status == "failed"
        assert wrong.error is not None and wrong.error.code == "bad_payload"
        fields = {e["field"] for e in wrong.error.details["errors"]}
        assert fields == {"(payload)"}  # order_no missing, order_id not allowed
        assert "order_no" in wrong.error.message and "order_id" in wrong.error.message
        right = await client.request("where is order 42", {"order_no": "42"}, target="orders")
        assert right.status == "completed" and right.output == {"state": "shipped"}
    assert seen == [{"order_no": "42"}]  # the handler never saw the wrong one


async def test_field_mismatch_the_worker_refuses_what_reaches_it_another_way(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """No semantic router here (targets only): the worker itself checks its contract."""
    seen: list[dict[str, Any]] = []
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, order_agent(seen))
    async with MeshClient(conn) as client:
        wrong = await client.request("look it up", {"order_id": 7}, target="orders")
        assert wrong.error is not None and wrong.error.code == "bad_payload"
        broken = await client.request("look it up", {"order_no": "broken"}, target="orders")
        assert broken.error is not None and broken.error.code == "bad_handler_output"
        assert "state" in broken.error.message
        fine = await client.request("look it up", {"order_no": "8"}, target="orders")
        assert fine.status == "completed"
    assert seen == [{"order_no": "broken"}, {"order_no": "8"}]


async def test_the_harness_checks_the_contract_too() -> None:
    seen: list[dict[str, Any]] = []
    harness = AgentHarness(order_agent(seen))
    result = await harness.run({"order_id": "1"})
    assert result.error is not None and result.error.code == "bad_payload"
    assert seen == []


@pytest.mark.access_off("runs the CLI with the default login")
async def test_mesh_agents_schemas_shows_each_agents_contract(
    mesh: SemanticMesh, settings: Settings
) -> None:
    await mesh.start(order_agent([]))
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mesh.cli.main",
        "agents",
        "--schemas",
        env={**os.environ, "MESH_NAMESPACE": settings.namespace},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    shown = json.loads(out)
    assert shown["orders"]["input_schema"] == OrderLookup.model_json_schema()
    assert shown["orders"]["output_schema"] == OrderState.model_json_schema()
