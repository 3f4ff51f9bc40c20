"""Handoffs: A->B->A ping-pong stopped at max_hops, alert.loop, halving deadlines, context."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.connection import MeshConnection
from mesh.dispatch.context import ContextRef, split_ref
from mesh.schemas import TaskEnvelope, decode, now_ms
from mesh.schemas.codec import dumps, loads
from tests import access_mode
from tests.conftest import wait_until
from tests.integration.dispatch_kit import EventTap, start_router, start_worker, wait_for_messages

pytestmark = pytest.mark.integration


def bouncer(state: MeshConnection, agent_id: str, other: str) -> Agent:
    """Hands every task to `other` and wraps its Result; records what it saw."""
    agent = Agent(agent_id, f"Bounces work to {other}")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        seen = {
            "agent": agent_id,
            "hops": task.hops,
            "deadline_ms": task.deadline_ms,
            "received_ms": now_ms(),
            "trajectory": task.trajectory,
            "parent": task.parent_task_id,
            "trace": task.trace_id,
        }
        await state.redis.rpush(state.keys.side_effect("seen"), dumps(seen))
        inner = await ctx.handoff("bounce it back", {"from": agent_id}, target=other)
        return {"inner": inner.model_dump(mode="json")}

    return agent


async def test_ping_pong_stops_at_max_hops_with_loop_alert_and_halved_deadlines(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    tap = await EventTap.open(conn, add_cleanup)
    await start_worker(conn, add_cleanup, bouncer(conn, "ping", "pong"))
    await start_worker(conn, add_cleanup, bouncer(conn, "pong", "ping"))
    async with MeshClient(conn) as client:
        result = await client.request(
            "start the rally", target="ping", max_hops=5, timeout_ms=20_000, wait_s=25
        )
    assert result.status == "completed"
    # unwrap the chain down to the Result the router gave at max_hops
    depth, innermost = 0, result.output
    while innermost and "inner" in innermost:
        inner = innermost["inner"]
        depth += 1
        if inner["status"] != "completed":
            break
        innermost = inner["output"]
    assert inner["status"] == "dead" and inner["error"]["code"] == "max_hops_exceeded"
    assert inner["error"]["details"]["trajectory"] == ["ping", "pong", "ping", "pong", "ping"]
    assert depth == 5
    (dead,) = await wait_for_messages(conn, conn.topology.dead_queue("hops"))
    assert decode(TaskEnvelope, dead.body).hops == 5

    seen = [loads(r) for r in await conn.redis.lrange(conn.keys.side_effect("seen"), 0, -1)]
    assert [s["agent"] for s in seen] == ["ping", "pong", "ping", "pong", "ping"]
    assert [s["hops"] for s in seen] == [0, 1, 2, 3, 4]
    assert len({s["trace"] for s in seen}) == 1
    for parent, child in itertools.pairwise(seen):
        # a child gets at most half of what its parent had left when it handed off
        parent_left = parent["deadline_ms"] - child["received_ms"]
        child_budget = child["deadline_ms"] - child["received_ms"]
        assert child_budget <= parent_left / 2 + 5, (parent, child)
        assert child["trajectory"] == [*parent["trajectory"], parent["agent"]]
    # three hops deep the budget is at most 1/8 of the original
    original = seen[0]["deadline_ms"] - seen[0]["received_ms"]
    assert seen[3]["deadline_ms"] - seen[3]["received_ms"] <= original / 8 + 10

    loops = await wait_until(lambda: tap.of("alert.loop"), timeout=5)
    assert loops and loops[0].agent_id == "ping" and loops[0].data["visits"] == 3
    assert loops[0].data["trajectory"] == ["ping", "pong", "ping", "pong", "ping"]
    assert await wait_until(lambda: tap.of("task.dead"), timeout=5)


async def test_context_travels_by_reference(conn: MeshConnection, add_cleanup: Any) -> None:
    first = Agent("first", "Writes the context")
    second = Agent("second", "Reads it")

    @first.handler
    async def write(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        ref = await ctx.save_context({"customer": "c-42", "notes": ["vip"]})
        inner = await ctx.handoff("read the context", target="second")
        return {"ref": ref, "inner": inner.output}

    @second.handler
    async def read(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        context = await ctx.context()
        return {"ref": task.context_ref, "context": context, "payload": task.payload}

    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, first)
    await start_worker(conn, add_cleanup, second)
    async with MeshClient(conn) as client:
        result = await client.request("go", target="first", wait_s=10)
    assert result.status == "completed" and result.output is not None
    inner = result.output["inner"]
    assert inner["ref"] == result.output["ref"]
    assert inner["context"] == {"customer": "c-42", "notes": ["vip"]}
    assert inner["payload"] == {}  # the context is not in the envelope
    # stored in the mesh's keys; under access control in the saving agent's view, named
    # after it, and copied into the view of the agent the handoff went to
    ref = split_ref(result.output["ref"])
    assert ref == ContextRef(result.trace_id or "", 1, "first" if access_mode.of(conn) else "")
    views = [conn.keys.for_agent(a) for a in ("first", "second")] if ref.origin else [conn.keys]
    for keys in views:
        ttl = await conn.redis.ttl(keys.context(ref.trace_id, ref.version, ref.origin))
        assert 0 < ttl <= conn.settings.context_ttl_s
