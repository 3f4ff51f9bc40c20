"""Story: the router is down (seed 002 section 4.3, level 3: silent failure is the worst
outcome). A caller hears so in well under 2 s instead of waiting out its timeout, or, with
local rules, its task goes straight to the rule's agent; with a router nothing changes."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import mesh.client
from mesh import Agent, MeshClient, NoRouter, TaskContext, WorkerRuntime
from mesh.client import ROUTERLESS_S
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.router.service import RouterService
from mesh.router_watch import RouterQueue, RouterWatch
from mesh.schemas import TaskEnvelope
from tests.conftest import wait_until
from tests.integration import dispatch_kit

pytestmark = pytest.mark.integration
#: local rules are refused under access control (a client may publish to ingress only)
rules_need_open_mesh = pytest.mark.access_off("local rules are refused under access control")

#: the story's promise: how long a caller may wait before hearing that no router runs
PROMISE_S = 2.0
RULES = {"refund|退款": "support.refunds"}


def refunds_agent() -> Agent:
    agent = Agent("support.refunds", "Refunds an order")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"refunded": task.payload.get("order"), "by": ctx.instance_id}

    return agent


async def start_worker(conn: MeshConnection, add_cleanup: Any) -> WorkerRuntime:
    worker = WorkerRuntime(refunds_agent(), conn)
    await worker.start()
    add_cleanup(worker.drain)
    return worker


async def test_story_router_down_no_rules_fails_at_once_with_no_router(
    conn: MeshConnection,
) -> None:
    async with MeshClient(conn) as client:
        started = time.monotonic()
        with pytest.raises(NoRouter) as raised:
            await client.request("refund order 42", task_id="down-1", timeout_ms=30_000)
        took = time.monotonic() - started
        seen = await RouterWatch(conn).read()
    assert took < PROMISE_S, took
    assert str(raised.value) == (
        f"no router consumes {conn.topology.router_queue}, so task_id=down-1 is not routed: "
        "check the routers with `mesh health router` (start one with `mesh router`)"
    )
    # nothing was published: no task waits for a router that may come back much later
    assert seen is not None and (seen.routers, seen.waiting) == (0, 0)


@rules_need_open_mesh
async def test_story_router_down_a_local_rule_sends_the_task_to_its_agent(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    worker = await start_worker(conn, add_cleanup)
    async with MeshClient(conn, local_rules=RULES) as client:
        started = time.monotonic()
        result = await client.request("我要退款", {"order": 42}, task_id="down-2", wait_s=10)
        took = time.monotonic() - started
        with pytest.raises(NoRouter) as unmatched:
            await client.request("what is the weather", task_id="down-3")
    assert result.status == "completed", result
    assert result.output == {"refunded": 42, "by": worker.instance_id}
    assert result.agent_id == "support.refunds"
    assert result.route is not None and result.route.strategy == "local_rule"
    assert client.sent_by_rule == 1
    assert took < PROMISE_S, took
    assert " and no local rule matches its text," in str(unmatched.value)
    # the worker recorded the task it claimed without a router, and ended it
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    assert (await store.state("down-2")).get("state") == "completed"


@rules_need_open_mesh
async def test_story_router_down_a_rule_for_an_agent_without_queue_is_no_router(
    conn: MeshConnection,
) -> None:
    async with MeshClient(conn, local_rules={"refund": "nobody.home"}) as client:
        with pytest.raises(NoRouter) as raised:
            await client.request("refund order 7", task_id="down-4")
    assert " and agent 'nobody.home' of the matching local rule has no queue," in str(raised.value)


@rules_need_open_mesh
async def test_story_router_down_with_a_router_routing_is_unchanged(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    router = RouterService(conn)
    await router.start()
    add_cleanup(router.close)
    await start_worker(conn, add_cleanup)
    async with MeshClient(conn, local_rules=RULES) as client:
        result = await client.request(
            "refund order 9", {"order": 9}, target="support.refunds", wait_s=10
        )
    assert result.status == "completed", result
    assert result.route is not None and result.route.strategy == "target"
    assert client.sent_by_rule == 0


async def test_story_router_down_the_router_going_away_ends_a_waiting_request(
    conn: MeshConnection, add_cleanup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The count the client trusts for a few seconds says a router runs; it has gone: the
    request looks again while it waits and ends with `NoRouter`, not at its timeout (the
    routerless span shortened from its 20 s so the test stays short)."""
    routerless_s = 4.0
    assert routerless_s < ROUTERLESS_S
    monkeypatch.setattr(mesh.client, "ROUTERLESS_S", routerless_s)
    # each under its own user with access control on (`tests.access_mode`)
    router = await dispatch_kit.start_router(conn, add_cleanup)
    await dispatch_kit.start_worker(conn, add_cleanup, refunds_agent())
    async with MeshClient(conn) as client:
        client.watch.ttl_s = 60.0  # the count read before the router went stays trusted
        first = await client.request("refund", target="support.refunds", wait_s=10)
        assert first.status == "completed"
        await router.close()
        await wait_until(_no_router(conn), timeout=5)
        started = time.monotonic()
        waiting = asyncio.create_task(client.request("refund", target="support.refunds"))
        with pytest.raises(NoRouter) as raised:
            await asyncio.wait_for(waiting, timeout=routerless_s + 10)
        took = time.monotonic() - started
    assert " any more (the task waits there until one does)," in str(raised.value)
    # no router seen for the routerless span, against the 35 s of its timeout
    assert routerless_s <= took < routerless_s + 5, took


async def test_story_router_down_a_stale_count_ends_no_request_while_routed_results_come(
    conn: MeshConnection, add_cleanup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a cluster a quorum queue's consumer count can read 0 through a leader change
    while its router works: a request waiting longer than the routerless span is not
    ended with `NoRouter` while Results of routed tasks keep coming."""
    routerless_s = 3.0
    monkeypatch.setattr(mesh.client, "ROUTERLESS_S", routerless_s)
    agent = Agent("support.slow", "Refunds an order, slowly when asked")
    agent.max_concurrency = 4

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        await asyncio.sleep(float(task.payload["sleep_s"]))
        return {"slept": task.payload["sleep_s"]}

    await dispatch_kit.start_router(conn, add_cleanup)
    await dispatch_kit.start_worker(conn, add_cleanup, agent)
    async with MeshClient(conn) as client:
        client.watch.ttl_s = 60.0  # the count read before it went stale stays trusted
        first = await client.request("refund", {"sleep_s": 0}, target=agent.agent_id, wait_s=10)
        assert first.status == "completed", first

        async def stale(*, max_age_s: float = 0.0) -> RouterQueue:
            return RouterQueue(routers=0, waiting=3)

        monkeypatch.setattr(client.watch, "read", stale)
        slow = asyncio.create_task(
            client.request(
                "refund", {"sleep_s": 2 * routerless_s}, target=agent.agent_id, wait_s=30
            )
        )
        quick: list[str] = []
        while not slow.done():
            done = await client.request("refund", {"sleep_s": 0}, target=agent.agent_id, wait_s=10)
            quick.append(done.status)
            await asyncio.wait({slow}, timeout=0.2)
        result = slow.result()
    assert result.status == "completed", result
    assert result.output == {"slept": 2 * routerless_s}
    assert len(quick) >= 10 and set(quick) == {"completed"}, quick


def _no_router(conn: MeshConnection) -> Any:
    watch = RouterWatch(conn)

    async def gone() -> bool:
        seen = await watch.read()
        return seen is not None and seen.routers == 0

    return gone
