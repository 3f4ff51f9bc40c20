"""Story: how long a task waits for an agent with no live instance.

An agent whose last lease ended within ``MESH_AGENT_RETURN_WINDOW_S`` is awaited: its task
waits in its queue (and ends ``expired: no_instance_returned`` at its deadline when no
instance returns). One gone longer than the window is no candidate any more: its task is
answered ``unroutable`` at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.access.roles import Role
from mesh.config import Settings
from mesh.schemas import TaskEnvelope
from mesh.services import start_worker
from tests.conftest import ROUTABLE_S
from tests.integration.routing_kit import SemanticMesh

pytestmark = pytest.mark.integration

AGENT = "gone.refunds"
#: the return window of these stories
WINDOW_S = 2.0


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5, agent_return_window_s=WINDOW_S
    )


def refunds() -> Agent:
    agent = Agent(
        AGENT,
        "Refunds customer orders: gives the money back for an order",
        examples=["refund order 12", "I want my money back for order 7"],
    )

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"by": ctx.instance_id}

    return agent


async def _started_then_stopped(mesh: SemanticMesh) -> float:
    """The agent ran one instance, now stopped (deregistered); when it stopped."""
    await mesh.start()
    worker_conn = await mesh.connection_of(Role("worker", AGENT))
    stop = await start_worker(worker_conn, refunds(), grace_s=1)
    assert mesh.selector is not None
    await mesh.selector.wait_routable([AGENT], timeout=ROUTABLE_S)
    await stop()
    return time.monotonic()


@pytest.mark.exclusive  # its spans are stretched when other tests share the cores
@pytest.mark.parametrize("targeted", [False, True], ids=["semantic", "target"])
async def test_a_task_for_an_agent_without_instance_waits_up_to_its_deadline(
    mesh: SemanticMesh, targeted: bool
) -> None:
    await _started_then_stopped(mesh)
    async with MeshClient(mesh.conn) as client:
        started = time.monotonic()
        result = await client.request(
            "refund order 3 please", target=AGENT if targeted else None, timeout_ms=1_500
        )
        took = time.monotonic() - started
    assert result.status == "expired", result
    assert result.error is not None and result.error.code == "no_instance_returned"
    assert f"waited in agent {AGENT!r}'s queue for an instance" in result.error.message
    assert 1.4 <= took < 6.0, took  # it waited for its deadline, not less


@pytest.mark.exclusive  # it must see the 2 s window open after the stop: a shared core can eat it
async def test_an_agent_gone_longer_than_the_window_is_unroutable_at_once(
    mesh: SemanticMesh,
) -> None:
    stopped = await _started_then_stopped(mesh)
    assert mesh.selector is not None
    assert mesh.selector.awaited(AGENT)
    while mesh.selector.awaited(AGENT):  # the window passes
        assert time.monotonic() - stopped < WINDOW_S + 5
        await asyncio.sleep(0.05)
    async with MeshClient(mesh.conn) as client:
        started = time.monotonic()
        result = await client.request("refund order 4 please", timeout_ms=30_000)
        took = time.monotonic() - started
    assert result.status == "unroutable", result
    assert result.error is not None
    # the code and sentence are mesh.router.reasons' (no_live_instance); "since" is when the
    # instance deregistered (the snapshot's last_live_ms), a little over the window ago
    assert result.error.code == "no_live_instance", result.error
    assert f"agent {AGENT!r} matches the task but has no live instance" in result.error.message
    assert "its last lease ended" in result.error.message, result.error.message
    assert took < 3.0, took  # answered at once, not after waiting
