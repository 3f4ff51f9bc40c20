"""Retries with backoff, accept timeouts and reroutes, Reject, deadlines in the queue."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from mesh import Agent, MeshClient, Reject, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.messaging import Publisher
from mesh.schemas import TaskEnvelope, decode, now_ms
from tests.agents_for_tests import effect_agent, failing_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import (
    EventTap,
    OrderedSelector,
    declare_idle_agents,
    start_router,
    start_worker,
    wait_for_messages,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace,
        heartbeat_s=0.5,
        lease_ttl_s=1.5,
        retry_delays_ms=(200, 400),
        accept_timeout_ms=300,
    )


async def test_always_failing_handler_three_attempts_with_growing_delays_then_dead(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, failing_agent(conn))
    async with MeshClient(conn) as client:
        result = await client.request("try hard", target="flaky", wait_s=10)
    assert result.status == "failed"
    assert result.error is not None and result.error.code == "retries_exhausted"
    assert result.error.details["attempts"] == 3
    assert "backend down" in result.error.details["last_error"]
    raw = await conn.redis.lrange(conn.keys.side_effect(f"attempts:{result.task_id}"), 0, -1)
    times = [int(t) for t in raw]
    assert len(times) == 3
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert 180 <= gaps[0] < gaps[1], gaps  # 200 ms, then 400 ms
    assert gaps[1] >= 380, gaps
    (dead,) = await wait_for_messages(conn, conn.topology.dead_queue("retries"))
    assert decode(TaskEnvelope, dead.body).task_id == result.task_id
    assert "last_error" in dead.headers["x-mesh-details"]
    history = [
        h["state"]
        for h in await TaskStore(conn.redis, conn.keys, conn.settings).history(result.task_id)
    ]
    assert history.count("retrying") == 2 and history[-1] == "failed"


async def test_no_consumer_accept_timeout_reroutes_to_next_candidate(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    # "asleep" has a queue but nobody consumes it: the dispatch expires after 300 ms
    await declare_idle_agents(conn, "asleep")
    await start_router(conn, add_cleanup, OrderedSelector("asleep", "effect"))
    await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        started = asyncio.get_running_loop().time()
        result = await client.request("anyone?", wait_s=10)
        took = asyncio.get_running_loop().time() - started
    assert result.status == "completed" and result.agent_id == "effect"
    assert took >= 0.3
    history = await TaskStore(conn.redis, conn.keys, conn.settings).history(result.task_id)
    states = [h["state"] for h in history]
    assert states == [
        "submitted",
        "routing",
        "dispatched",
        "rerouting",
        "routing",
        "dispatched",
        "accepted",
        "processing",
        "completed",
    ]


async def test_target_not_taken_in_time_is_tried_again_then_unroutable(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """A target is its task's only candidate: an accept timeout (a worker busy or
    reconnecting after a broker restart) sends it to the same target again, at most
    `max_reroutes` times; a worker that shows up in between completes it."""
    await declare_idle_agents(conn, "effect")
    await start_router(conn, add_cleanup)
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    async with MeshClient(conn) as client:
        envelope = TaskEnvelope(capability="late worker", target="effect", reply_to=client.reply_to)
        pending = asyncio.ensure_future(client.send(envelope, wait_s=10))

        async def rerouted_once() -> bool:
            return "rerouting" in [h["state"] for h in await store.history(envelope.task_id)]

        # the first dispatch expires unconsumed; then a worker starts
        await wait_until(rerouted_once, timeout=5)
        await start_worker(conn, add_cleanup, effect_agent(conn))
        result = await pending
        assert result.status == "completed" and result.agent_id == "effect"
        # nobody ever consumes: three dispatches to the target, then unroutable
        await declare_idle_agents(conn, "absent")
        started = asyncio.get_running_loop().time()
        gone = await client.request("nobody home", target="absent", wait_s=10)
        took = asyncio.get_running_loop().time() - started
    assert gone.status == "unroutable"
    assert gone.error is not None and gone.error.code == "reroutes_exhausted"
    assert took >= 3 * 0.3
    states = [h["state"] for h in await store.history(gone.task_id)]
    assert states.count("dispatched") == conn.settings.max_reroutes + 1


async def test_no_candidate_left_is_unroutable_and_answered(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await declare_idle_agents(conn, "a1", "a2", "a3", "a4")
    await start_router(conn, add_cleanup, OrderedSelector("a1", "a2"))
    async with MeshClient(conn) as client:
        result = await client.request("anyone?", wait_s=10)
    assert result.status == "unroutable"
    assert result.error is not None and result.error.code == "no_agent"
    assert result.error.details["excluded_agents"] == ["a1", "a2"]
    # more candidates than max_reroutes allows: stops after 2 reroutes
    await start_router(conn, add_cleanup, OrderedSelector("a1", "a2", "a3", "a4"))
    async with MeshClient(conn) as client:
        capped = await client.request("anyone?", wait_s=10)
    assert capped.error is not None and capped.error.code in {"reroutes_exhausted", "no_agent"}
    dead = await wait_for_messages(conn, conn.topology.dead_queue("unroutable"), 2)
    assert {decode(TaskEnvelope, m.body).task_id for m in dead} == {result.task_id, capped.task_id}


async def test_reject_goes_to_the_next_candidate(conn: MeshConnection, add_cleanup: Any) -> None:
    picky = Agent("picky", "Rejects everything")

    @picky.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        raise Reject("not my kind of task")

    await start_router(conn, add_cleanup, OrderedSelector("picky", "effect"))
    await start_worker(conn, add_cleanup, picky)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        result = await client.request("something", wait_s=10)
    assert result.status == "completed" and result.agent_id == "effect"


async def test_deadline_passing_in_the_agent_queue_expires_through_the_router(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """AMQP expiration path: nobody consumes before the deadline; the router ends it."""
    await declare_idle_agents(conn, "asleep")
    await start_router(conn, add_cleanup, OrderedSelector("asleep", "effect"))
    await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        result = await client.request("quick!", timeout_ms=200, wait_s=10)
    assert result.status == "expired"
    assert result.error is not None and result.error.code == "deadline_passed"
    (dead,) = await wait_for_messages(conn, conn.topology.dead_queue("expired"))
    assert decode(TaskEnvelope, dead.body).task_id == result.task_id
    assert await conn.redis.get(conn.keys.side_effect(f"runs:{result.task_id}")) is None


@pytest.mark.access_off("the test plays the router; Results reach callers through one")
async def test_deadline_passed_before_the_worker_took_it_is_not_executed(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    """Worker path: a dispatch that reaches a worker after its deadline is not run."""
    worker = await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn, wait_for_router=True) as client:
        envelope = TaskEnvelope(
            capability="late",
            target="effect",
            reply_to=client.reply_to,
            deadline_ms=now_ms() - 1,
        )
        waiting = asyncio.ensure_future(client.send(envelope, wait_s=10))
        await asyncio.sleep(0)
        publisher = Publisher(conn)
        await publisher.start()
        add_cleanup(publisher.close)
        await publisher.publish_envelope(
            conn.topology.capabilities, conn.topology.agent_routing_key("effect"), envelope
        )
        # (the same task also went to ingress with no router running: never mind it)
        result = await waiting
    assert result.status == "expired"
    assert result.error is not None and result.error.code == "expired_in_queue"
    assert worker.executed == 0
    (dead,) = await wait_for_messages(conn, conn.topology.dead_queue("expired"))
    assert decode(TaskEnvelope, dead.body).task_id == envelope.task_id


async def test_handler_cancelled_at_the_deadline(conn: MeshConnection, add_cleanup: Any) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    tap = await EventTap.open(conn, add_cleanup, "task.#")
    async with MeshClient(conn) as client:
        started = asyncio.get_running_loop().time()
        result = await client.request(
            "slow", {"sleep_s": 5}, target="effect", timeout_ms=400, wait_s=10
        )
        took = asyncio.get_running_loop().time() - started
    assert result.status == "expired"
    assert result.error is not None and result.error.code == "deadline_passed"
    assert took < 2
    assert await conn.redis.get(conn.keys.side_effect(f"work:{result.task_id}")) is None
    await wait_until(lambda: tap.of("task.expired", result.task_id), timeout=5)
