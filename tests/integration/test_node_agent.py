"""The Node.js agent (``agents/node/``) in a mesh of Python registry and router.

It knows the mesh only from the AsyncAPI document (its channels, schemas and the
``x-mesh-redis`` steps): the router routes a request to it by meaning, a task past its
deadline comes back ``expired``, and a commit under a lapsed lease is refused.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from tests.conftest import ROUTABLE_S
from tests.integration.node_kit import NodeAgent, ensure_node_modules
from tests.integration.routing_kit import SemanticMesh, agent
from tests.integration.worker_process import worker_settings

pytestmark = pytest.mark.integration

NODE = "node.text-stats"

WEATHER = agent(
    "weather",
    "Weather forecasts: rain, temperature and wind for a city in the coming days.",
    ["will it rain in Paris tomorrow", "how hot will it be this weekend", "明天北京下雨吗"],
)


@pytest.fixture(scope="module")
def node_modules() -> None:
    ensure_node_modules()


@pytest.fixture
async def node_mesh(
    node_modules: None, mesh: SemanticMesh, conn: MeshConnection, tmp_path: Path
) -> AsyncIterator[tuple[SemanticMesh, NodeAgent]]:
    """Registry, router and a Python agent in this process; the Node agent as a process."""
    await mesh.start(WEATHER)
    node = await NodeAgent(await worker_settings(conn, NODE), NODE, tmp_path).start()
    try:
        assert mesh.selector is not None
        await mesh.selector.wait_routable([NODE], timeout=ROUTABLE_S)
        yield mesh, node
    finally:
        assert await node.stop() == 0
    assert node.logged("deregistered")


async def test_the_router_routes_a_request_to_the_node_agent(
    node_mesh: tuple[SemanticMesh, NodeAgent], conn: MeshConnection
) -> None:
    _mesh, node = node_mesh
    registered = node.logged("registered")[0]
    async with MeshClient(conn) as client:
        result = await client.request(
            "how many words are in this sentence?", {"text": "one two three. 四五"}
        )
        weather = await client.request("will it rain in Paris tomorrow?")
    assert result.status == "completed", result
    assert result.agent_id == NODE and result.route is not None
    assert result.route.strategy != "target"
    assert result.output is not None
    assert (result.output["words"], result.output["sentences"]) == (5, 2)
    assert result.output["token"] == registered["token"]
    assert weather.status == "completed" and weather.agent_id == "weather"


async def test_a_task_past_its_deadline_is_answered_expired(
    node_mesh: tuple[SemanticMesh, NodeAgent], conn: MeshConnection
) -> None:
    _mesh, node = node_mesh
    async with MeshClient(conn) as client:
        result = await client.request(
            "count the words", {"text": "slow", "sleep_ms": 5000}, target=NODE, timeout_ms=600
        )
    assert result.status == "expired", result
    assert result.error is not None and result.error.code == "deadline_passed"
    assert result.agent_id == NODE
    assert (result.timings.get("handler_ms") or 0) < 3000
    answered = await node.wait_for("answered")
    assert (answered["task_id"], answered["status"]) == (result.task_id, "expired")


async def test_a_commit_under_a_lapsed_lease_is_refused(
    node_mesh: tuple[SemanticMesh, NodeAgent], conn: MeshConnection
) -> None:
    """A partition drill: the handler runs without heartbeats past the lease (1.5 s), so
    its token is stale when it commits; the commit is refused, the instance registers
    again, and the task's next delivery is claimed and answered under the new token."""
    _mesh, node = node_mesh
    first = node.logged("registered")[0]["token"]
    async with MeshClient(conn) as client:
        result = await client.request(
            "count the words",
            {"text": "a b", "drill": "partition", "hold_ms": 3000},
            target=NODE,
            timeout_ms=20_000,
        )
    refused = node.logged("result refused: stale token; handed back")
    assert [line["token"] for line in refused] == [first]
    assert result.status == "completed", result
    assert result.output is not None and result.output["words"] == 2
    assert result.output["token"] > first
    assert result.output["token"] == node.logged("registered")[-1]["token"]
