"""A handler output that cannot travel never wedges the instance (the worker-SDK issue, point 1).

Before the fix, encoding such an output crashed the worker task while saving the Result: the
delivery was never settled, the caller waited until its timeout, and after
`max_concurrency` of them the instance took nothing more.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.registry.state import InstanceState
from mesh.schemas import TaskEnvelope
from mesh.worker.agent import Agent
from mesh.worker.context import TaskContext
from mesh.worker.outcome import check_output
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration

#: payload "kind" -> what the handler returns
BAD_OUTPUTS = ("numpy", "method", "set", "huge", "nested_numpy")


def _output(kind: str, ctx: TaskContext) -> dict[str, Any]:
    if kind == "numpy":
        return {"score": np.float32(0.5)}
    if kind == "nested_numpy":
        return {"items": [1, {"v": np.int64(3)}]}
    if kind == "method":
        return {"left": ctx.time_left_ms}  # the method, not its value
    if kind == "set":
        return {"tags": {"a", "b"}}
    if kind == "huge":
        return {"blob": "x" * (2 << 20)}
    return {"ok": kind}


async def test_unencodable_outputs_fail_cleanly_and_the_instance_keeps_working(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    agent = Agent("bad.output", "returns odd outputs", max_concurrency=2)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return _output(str(task.payload["kind"]), ctx)

    await start_router(conn, add_cleanup)
    worker = await start_worker(conn, add_cleanup, agent)
    async with MeshClient(conn) as client:
        # more bad outputs than the instance has slots: a wedge would show at once
        for kind in BAD_OUTPUTS:
            result = await client.request(
                "odd", {"kind": kind}, target=agent.agent_id, timeout_ms=10_000, wait_s=15
            )
            assert result.status == "failed", (kind, result)
            assert result.error is not None and result.error.code == "bad_handler_output"
            expected_key = {
                "numpy": "output.score",
                "nested_numpy": "output.items[1].v",
                "method": "output.left",
                "set": "output.tags",
            }.get(kind)
            if expected_key is not None:
                assert result.error.details["key"] == expected_key
                assert result.error.message.startswith(expected_key)
            else:
                assert result.error.details["bytes"] > result.error.details["limit"]
        for i in range(4):
            ok = await client.request(
                "fine", {"kind": f"fine-{i}"}, target=agent.agent_id, timeout_ms=10_000, wait_s=15
            )
            assert ok.status == "completed" and ok.output == {"ok": f"fine-{i}"}
    await worker.run_until_idle(5)
    assert worker.in_flight == 0 and worker.stuck() == 0


def test_check_output_names_the_offending_key_and_type() -> None:
    bad = check_output({"a": {"b": [1, np.float32(2)]}}, 1 << 20)
    assert bad.kind == "failed" and bad.code == "bad_handler_output"
    assert bad.details == {"key": "output.a.b[1]", "type": "numpy.float32"}
    assert "numpy.float32" in bad.message
    assert check_output({1: "x"}, 1 << 20).details["key"] == "output[1]"
    assert check_output(["not", "a", "dict"], 1 << 20).details == {"type": "list"}
    good = check_output({"a": [1, 2.5, None, True, "s", (1, 2)]}, 1 << 20)
    assert good.kind == "completed"


def test_a_stuck_count_shows_in_the_instance_status() -> None:
    base = {
        "instance_id": "a-1",
        "agent_id": "a",
        "token": "3",
        "status": "up",
        "lease_expires_ms": str(10**13),
        "in_flight": "2",
    }
    assert InstanceState.from_hash(base).display_status(0) == "busy"  # type: ignore[union-attr]
    stuck = InstanceState.from_hash({**base, "stuck": "2"})
    assert stuck is not None and stuck.stuck == 2 and stuck.display_status(0) == "stuck"


async def test_a_heartbeat_carries_the_stuck_count_to_mesh_agents(conn: MeshConnection) -> None:
    from mesh.cli.agents import render_table, rows
    from mesh.registry.lease import Beat, LeaseStore
    from mesh.registry.state import load_state

    agent = Agent("stuck.agent", "gets stuck")
    leases = LeaseStore(conn.redis, conn.keys, conn.settings.lease_ttl_s)
    grant = await leases.grant(agent.registration("stuck.agent-1"))
    renewed = await leases.renew([Beat("stuck.agent", "stuck.agent-1", grant.token, 3, 4, 2)])
    assert renewed[0].code == "renewed"
    state = await load_state(conn.redis, conn.keys)
    inst = state["stuck.agent"].instances["stuck.agent-1"]
    assert inst.stuck == 2 and inst.in_flight == 3
    table = rows(state, grant.now_ms)
    assert table[0]["status"] == "stuck"
    assert "stuck (2 unsettled)" in render_table(table)
