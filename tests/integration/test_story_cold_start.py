"""Story: a new agent close to an established one gets its cold-start quota, then stops.

The router's quota (`mesh.router.coldstart`) gives a cold agent at least a share of the
tasks its best candidate wins by a small margin, also when the cold agent scores just
below the threshold, until it has completed ``MESH_COLD_START_COMPLETIONS`` tasks; its
counters live in Redis, shared by the routers.
"""

from __future__ import annotations

import dataclasses

import pytest

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.router.coldstart import ColdStartQuota
from tests.conftest import wait_until
from tests.integration.routing_kit import EventTap, SemanticMesh, agent

pytestmark = pytest.mark.integration

OLD = agent(
    "refunds",
    "Handles returns, refunds and exchanges of purchased products. Needs an order id.",
    ["I want to return the phone I bought last month", "can I get my money back"],
)
NEW = agent(
    "refunds-new",
    "Handles refunds of purchased products: sends the money back to the card.",
    ["I want my money back for the phone", "refund my order"],
)
#: quota settings of the test: 1 task in 4, until 2 completions
SHARE, COMPLETIONS = 0.25, 2


@pytest.mark.parametrize(
    ("text", "below"),
    [
        ("can I get a refund for my order", False),
        ("the phone I bought is broken, I want my money back", True),
    ],
    ids=["close", "just-below-threshold"],
)
async def test_a_new_agent_gets_its_quota_until_it_completed_n_tasks(
    mesh: SemanticMesh, conn: MeshConnection, text: str, below: bool
) -> None:
    conn.settings = conn.settings.model_copy(
        update={"exploration_share": SHARE, "cold_start_completions": COMPLETIONS}
    )
    # the established agent: 100 tasks completed before, in its Redis counters
    await conn.redis.hset(conn.keys.stats("refunds"), "completed", 100)
    await mesh.start(OLD, NEW)
    selector = mesh.selector
    assert selector is not None
    # the head fits of the agents joining are over: a fit landing between the requests
    # below would move the scores the test reads from the first decision
    keeper, index = selector.keeper, selector.index
    await wait_until(lambda: keeper._fit_task is None and not index.dirty, timeout=30)
    assert _completed(mesh, "refunds") == 100 and _completed(mesh, "refunds-new") == 0
    # idleness and load move with each dispatch, learned texts with each completion: the
    # test keeps the agents' totals what their registrations make them (the tasks name an
    # absent agent as excluded, so they count as rerouted, whose texts are not learned)
    # the margin the mesh counts as close: wide enough for the fitted head, which sets the
    # two agents' ranks apart by up to ~0.2 on these texts
    weights = dataclasses.replace(selector.weights, w_idle=0.0, w_load=0.0, cold_start_margin=0.3)
    selector.weights = weights
    unlearned = {"excluded_agents": ["nobody"]}
    async with MeshClient(conn) as client:
        first = await selector.decide(text, {}, [], explore=False)
        parts = {c.agent_id: c for c in first.candidates()}
        old, new = parts["refunds"], parts["refunds-new"]
        assert first.agent_id == "refunds" and old.total > new.total
        assert old.total - new.total <= weights.cold_start_margin
        if below:  # the new agent just below the threshold, the old one above it
            threshold = new.similarity + new.keyword + 0.01
            assert old.similarity + old.keyword >= threshold
            weights = dataclasses.replace(weights, threshold=threshold)
        selector.weights = weights
        tap = await EventTap(conn, "route.decision").start()
        routed = [await client.request(text, wait_s=30, **unlearned) for _ in range(8)]
        assert all(r.status == "completed" for r in routed), routed
        explored = [r.agent_id for r in routed if r.route and r.route.strategy == "exploration"]
        # 1 task in 4 of those it was close on: the 4th and the 8th
        assert explored == ["refunds-new", "refunds-new"], [r.route for r in routed]
        assert [r.agent_id for r in routed].count("refunds-new") == 2
        assert routed[3].agent_id == "refunds-new" and routed[7].agent_id == "refunds-new"
        if below:
            # decisions go out in batches: the Result can arrive before its decision event
            event = await wait_until(
                lambda: next((e for e in tap.events if e.task_id == routed[3].task_id), None),
                timeout=10,
            )
            cand = {c["agent_id"]: c for c in event.data["candidates"]}
            assert cand["refunds-new"]["filtered"] == "below_threshold"
            assert cand["refunds"]["filtered"] is None
        # the counters are the mesh's, in Redis
        key = conn.keys.cold_start("refunds-new")

        async def counted() -> dict[bytes, bytes]:
            found: dict[bytes, bytes] = await conn.redis.hgetall(key)
            return found if found.get(b"seen") == b"8" else {}

        stored = await wait_until(counted, timeout=10)
        assert stored[b"given"] == b"2"
        # two completions: the new agent is warm, the quota stops
        await wait_until(lambda: _completed(mesh, "refunds-new") >= COMPLETIONS, timeout=10)
        after = [await client.request(text, wait_s=30, **unlearned) for _ in range(8)]
    assert all(r.status == "completed" for r in after)
    assert all(r.route and r.route.strategy != "exploration" for r in after), after
    if below:  # still below the threshold: only its quota ever gave it a task
        assert {r.agent_id for r in after} == {"refunds"}


def _completed(mesh: SemanticMesh, agent_id: str) -> int:
    assert mesh.selector is not None
    index = mesh.selector.index
    return int(index.completed[index.row(agent_id)]) if agent_id in index else 0


async def test_the_routers_share_the_counters(conn: MeshConnection) -> None:
    one, two = ColdStartQuota(conn.redis, conn.keys), ColdStartQuota(conn.redis, conn.keys)
    one.record(("new",), "new")
    one.record(("new",), None)
    two.record(("new",), None)
    await one.flush()
    assert one.counts("new") == (2, 1) and not one.pending
    await two.flush()  # the second router reads what the first wrote
    assert two.counts("new") == (3, 1)
    two.record(("new",), None)
    assert two.counts("new") == (4, 1)  # the mesh's totals, and its own not yet written
    await two.flush()
    one.record(("new",), "new")
    await one.flush()
    assert one.counts("new") == (5, 2)
    assert await conn.redis.ttl(conn.keys.cold_start("new")) > 0
