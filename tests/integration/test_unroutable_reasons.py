"""Every unroutable says why on the wire: each cause its own code (issue: one message
used to cover four causes), in the Result the caller gets and in the dead letter."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from mesh import TaskContext
from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.errors import Reject
from mesh.router.embedding import Embedder
from mesh.schemas import Result, TaskEnvelope
from mesh.worker.agent import Agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import wait_for_messages
from tests.integration.routing_kit import SemanticMesh, agent

pytestmark = pytest.mark.integration

REFUNDS = agent(
    "refunds",
    "Handles returns, refunds and exchanges of purchased products. Needs an order id.",
    ["I want to return the phone I bought last month", "can I get my money back"],
    tags={"region": "eu"},
)
LOGISTICS = agent(
    "logistics",
    "Tracks parcels and deliveries: shipping status, delivery dates, lost packages.",
    ["where is my package", "my order has not arrived yet"],
)


def _picky() -> Agent:
    picky = Agent("picky", "Rejects everything it is given")

    @picky.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        raise Reject("not my kind of task")

    return picky


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _code(result: Result) -> str:
    assert result.status == "unroutable", result
    assert result.error is not None
    return result.error.code


async def test_each_cause_has_its_code_on_the_wire(
    embedder: Embedder, mesh_env: Callable[..., Awaitable[MeshConnection]]
) -> None:
    conn = await mesh_env()
    # a fallback agent is configured but never runs: below the threshold is unroutable;
    # no return window, so a stopped agent counts as gone at once (test_story_agent_gone
    # covers the window)
    conn.settings = conn.settings.model_copy(
        update={"fallback_agent": "helpdesk", "agent_return_window_s": 0}
    )
    mesh = SemanticMesh(conn, embedder)
    try:
        await mesh.start(REFUNDS, _picky(), LOGISTICS)
        async with MeshClient(conn) as client:
            below = await client.request("compose a haiku about the autumn moon", wait_s=20)
            assert _code(below) == "below_threshold"
            assert below.error is not None
            details = below.error.details
            assert details["best_score"] < details["threshold"]
            assert "the fallback agent helpdesk has no live instance" in below.error.message

            tags = await client.request(
                "can I get my money back", required_tags={"region": "us"}, wait_s=20
            )
            assert _code(tags) == "tags_excluded"
            assert tags.error is not None and "region=us" in tags.error.message

            unknown = await client.request("anything", target="nobody-home", wait_s=20)
            assert _code(unknown) == "unknown_target"

            refused = await client.request("anything", target="picky", wait_s=20)
            assert _code(refused) == "target_excluded"

            # logistics' only worker stops: the agent that matches has no live instance
            stop_logistics = mesh.stops.pop()
            await stop_logistics()
            assert mesh.selector is not None
            selector = mesh.selector
            await wait_until(lambda: not selector.is_routable("logistics"), timeout=10)
            down = await client.request("where is my package, it has not arrived", wait_s=20)
            assert _code(down) == "no_live_instance"
            assert down.error is not None
            assert "agent 'logistics' matches the task but has no live instance" in (
                down.error.message
            )
        # each is in the dead-letter queue with its code
        letters = await wait_for_messages(conn, conn.topology.dead_queue("unroutable"), 5)
        codes = {json.loads(_text(m.headers["x-mesh-details"]))["code"] for m in letters}
        assert codes == {
            "below_threshold",
            "tags_excluded",
            "unknown_target",
            "target_excluded",
            "no_live_instance",
        }
    finally:
        await mesh.close()


async def test_no_agent_registered_says_so(
    embedder: Embedder, mesh_env: Callable[..., Awaitable[MeshConnection]]
) -> None:
    conn = await mesh_env()
    mesh = SemanticMesh(conn, embedder)
    try:
        await mesh.start()
        async with MeshClient(conn) as client:
            r = await client.request("compose a haiku", wait_s=20)
        assert _code(r) == "no_agents"
    finally:
        await mesh.close()
