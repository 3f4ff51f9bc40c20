"""Semantic routing on the real broker, with the real (offline) multilingual model."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from typing import Any

import numpy as np
import pytest

from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.router.embedding import Embedder
from mesh.router.memory import ExampleMemory
from mesh.schemas import TaskEnvelope, decode
from mesh.services import build_selector
from tests.conftest import ROUTABLE_S, wait_until
from tests.integration.dispatch_kit import drain_queue
from tests.integration.routing_kit import EventTap, SemanticMesh, agent

pytestmark = pytest.mark.integration


REFUNDS = agent(
    "refunds",
    "Handles returns, refunds and exchanges of purchased products. Needs an order id.",
    [
        "I want to return the phone I bought last month",
        "can I get my money back",
        "退款什么时候到账",
        "这个商品我想退货",
    ],
)
LOGISTICS = agent(
    "logistics",
    "Tracks parcels and deliveries: shipping status, delivery dates, lost packages.",
    [
        "where is my package",
        "my order has not arrived yet",
        "我的快递到哪了",
        "物流信息三天没更新了",
    ],
)
PRESALES = agent(
    "presales",
    "Answers questions before a purchase: product features, prices, stock.",
    ["does this laptop support two monitors", "is the blue one in stock", "这款耳机有降噪吗"],
)


async def test_routes_each_request_to_the_right_agent(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS, LOGISTICS, PRESALES)
    cases = {
        "the parcel I ordered two weeks ago still hasn't shown up": "logistics",
        "I would like my money back for order 77, the screen is cracked": "refunds",
        "does this phone come in blue, and is it in stock?": "presales",
        "包裹什么时候能送到": "logistics",
        "这双鞋我想退货退款": "refunds",
    }
    async with MeshClient(conn) as client:
        results = await asyncio.gather(*(client.request(t, wait_s=20) for t in cases))
    for (text, expected), result in zip(cases.items(), results, strict=True):
        assert result.status == "completed", (text, result)
        assert result.output == {"by": expected}, text


async def test_required_tags_filter_the_candidates(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    text = "Handles invoices and billing questions for business customers."
    examples = ["send me a copy of my last invoice", "why was I billed twice this month"]
    await mesh.start(
        agent("billing-eu", text, examples, tags={"region": "eu"}),
        agent("billing-us", text, examples, tags={"region": "us"}),
    )
    async with MeshClient(conn) as client:
        for region in ("us", "eu", "us"):
            r = await client.request(
                "I need a copy of my invoice", wait_s=20, required_tags={"region": region}
            )
            assert r.output == {"by": f"billing-{region}"}


async def _two_equal_translators(mesh: SemanticMesh) -> asyncio.Event:
    """Two agents with the same texts whose tasks wait until the returned event is set."""
    release = asyncio.Event()

    async def slow(task: TaskEnvelope) -> dict[str, Any]:
        await release.wait()
        return {"by": "slow"}

    text = "Translates documents between English and French."
    examples = ["translate this letter into French", "how do you say thank you in French"]
    await mesh.start(
        agent("translator-a", text, examples, reply=slow),
        agent("translator-b", text, examples, reply=slow),
    )
    return release


async def test_near_tie_is_arbitrated_and_load_separates_equals(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    release = await _two_equal_translators(mesh)
    assert mesh.selector is not None
    # both agents are cold: without this, the cold-start quota gives the runner-up a task
    mesh.selector.weights = dataclasses.replace(mesh.selector.weights, exploration_share=0.0)
    tap = await EventTap(conn, "route.decision").start()
    async with MeshClient(conn) as client:
        first = asyncio.ensure_future(client.request("translate my letter to French", wait_s=20))
        await wait_until(lambda: len(tap.of("route.decision")) == 1, timeout=10)
        second = asyncio.ensure_future(client.request("translate my CV into French", wait_s=20))
        await wait_until(lambda: len(tap.of("route.decision")) == 2, timeout=10)
        release.set()
        await asyncio.gather(first, second)
    tie, after = tap.events
    # two equal agents: a near tie, settled by arbitration (similarity, load, success rate)
    assert tie.data["route"]["strategy"] == "arbitration"
    assert {tie.agent_id, tie.data["runner_up"]} == {"translator-a", "translator-b"}
    top = tie.data["candidates"][:2]
    assert abs(top[0]["similarity"] - top[1]["similarity"]) < 1e-4
    # the first one is now busy: the second task goes to the other, idle one
    assert after.agent_id != tie.agent_id


async def test_a_load_refresh_from_an_older_heartbeat_keeps_the_dispatch(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    """The router re-reads loads from the agents' last heartbeats every second; one taken
    before a dispatch must not make the busy agent look idle (the second task would follow
    the first one there)."""
    release = await _two_equal_translators(mesh)
    assert mesh.selector is not None
    keeper = mesh.selector.keeper
    mesh.selector.weights = dataclasses.replace(mesh.selector.weights, exploration_share=0.0)
    tap = await EventTap(conn, "route.decision").start()
    async with MeshClient(conn) as client:
        first = asyncio.ensure_future(client.request("translate my letter to French", wait_s=20))
        await wait_until(lambda: len(tap.of("route.decision")) == 1, timeout=10)
        busy = tap.events[0].agent_id
        assert busy is not None
        keeper._refresh_stats()  # the periodic refresh, before the agent's next heartbeat
        assert mesh.selector.index.stats(busy).load >= 1
        second = asyncio.ensure_future(client.request("translate my CV into French", wait_s=20))
        await wait_until(lambda: len(tap.of("route.decision")) == 2, timeout=10)
        release.set()
        await asyncio.gather(first, second)
    assert tap.events[1].agent_id not in (None, busy)


async def test_fallback_takes_what_nobody_matches_with_low_confidence(
    conn: MeshConnection, embedder: Embedder, mesh_env: Any, settings: Settings
) -> None:
    conn2 = await mesh_env("-fallback")
    conn2.settings = conn2.settings.model_copy(update={"fallback_agent": "helpdesk"})
    m = SemanticMesh(conn2, embedder)
    try:
        await m.start(REFUNDS, agent("helpdesk", "General help desk."))
        tap = await EventTap(conn2, "route.decision").start()
        async with MeshClient(conn2) as client:
            r = await client.request("compose a haiku about the autumn moon", wait_s=20)
        assert r.status == "completed" and r.output == {"by": "helpdesk"}
        assert r.route is not None
        assert r.route.strategy == "fallback" and r.route.low_confidence
        # neither agent has a bidder: no call for bids waits out its window for nothing
        await wait_until(lambda: tap.of("route.decision", r.task_id), timeout=5)
        assert "bids" not in tap.of("route.decision", r.task_id)[0].data
    finally:
        await m.close()


async def test_unroutable_without_fallback_is_answered_and_dead_lettered(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    conn.settings = conn.settings.model_copy(update={"human_queue": False})
    await mesh.start(REFUNDS)
    async with MeshClient(conn) as client:
        r = await client.request("compose a haiku about the autumn moon", wait_s=20)
    assert r.status == "unroutable"
    assert r.error is not None and r.error.code == "no_fallback"
    dead = await drain_queue(conn, conn.topology.dead_queue("unroutable"))
    assert [decode(TaskEnvelope, m.body).task_id for m in dead] == [r.task_id]


async def test_learning_persists_across_a_router_restart(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS, LOGISTICS)
    text = "the refund for my cancelled order never reached my card"
    async with MeshClient(conn) as client:
        r = await client.request(text, wait_s=20)
    assert r.output == {"by": "refunds"}
    memory = ExampleMemory(conn.redis, conn.keys)
    await wait_until(lambda: _has_text(memory, "refunds", text), timeout=30)

    await mesh.stop_router()
    selector = await mesh.start_router()
    await selector.wait_routable(["refunds"], timeout=ROUTABLE_S)
    await wait_until(lambda: len(selector.index.entry("refunds").learned) == 1, timeout=10)
    stored = (await memory.load("refunds")).texts
    assert stored == (text,)


async def _has_text(memory: ExampleMemory, agent_id: str, text: str) -> bool:
    return text in (await memory.load(agent_id)).texts


def bidding_agent(agent_id: str, text: str, confidence: float | None) -> Any:
    a = agent(agent_id, text)

    @a.bidder
    async def bid(request: Any) -> float | None:
        return confidence

    return a


async def test_call_for_bids_picks_the_confident_bidder(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(
        bidding_agent("astro-a", "Answers questions about stars and galaxies.", 0.2),
        bidding_agent("astro-b", "Explains planets and moons of the solar system.", 0.9),
        bidding_agent("astro-c", "Describes telescopes and observatories.", None),
    )
    tap = await EventTap(conn, "route.decision").start()
    async with MeshClient(conn) as client:
        r = await client.request("how long is a year on the dwarf planet Ceres", wait_s=20)
    assert r.status == "completed" and r.output == {"by": "astro-b"}
    assert r.route is not None and r.route.strategy == "bid" and r.route.score == 0.9
    await wait_until(lambda: tap.of("route.decision", r.task_id), timeout=5)
    bids = {b["agent_id"]: b["confidence"] for b in tap.of("route.decision")[0].data["bids"]}
    assert bids == {"astro-a": 0.2, "astro-b": 0.9}


async def test_breaker_opens_on_failures_and_recovers_after_a_probe(
    conn: MeshConnection, embedder: Embedder, mesh_env: Any, settings: Settings
) -> None:
    conn2 = await mesh_env("-breaker")
    conn2.settings = conn2.settings.model_copy(
        update={"breaker_open_s": 1.0, "breaker_min_calls": 3, "breaker_window_s": 30.0}
    )
    healthy = asyncio.Event()

    async def flaky(task: TaskEnvelope) -> dict[str, Any]:
        if not healthy.is_set():
            raise ValueError("downstream database is down")
        return {"by": "weather-a"}

    m = SemanticMesh(conn2, embedder)
    try:
        await m.start(
            agent(
                "weather-a",
                "Gives weather forecasts for cities in France.",
                ["will it rain in Paris tomorrow", "weather forecast for Lyon this week"],
                reply=flaky,
            ),
            agent(
                "weather-b",
                "Gives weather forecasts for any city in the world.",
                ["what's the weather like in Tokyo this weekend", "how hot is it in Cairo"],
            ),
        )
        assert m.selector is not None
        breakers = m.selector.breakers
        async with MeshClient(conn2) as client:
            seen = []
            while breakers.state("weather-a") == "closed":
                r = await client.request("will it rain in Paris tomorrow", wait_s=20)
                seen.append(r.agent_id)
                await wait_until(lambda: _outcomes(m) >= len(seen), timeout=5)
                assert len(seen) < 10, "the breaker never opened"
            assert seen.count("weather-a") == 3  # min_calls failures, all on the best match
            r = await client.request("will it rain in Paris tomorrow", wait_s=20)
            assert r.output == {"by": "weather-b"}  # open: weather-a is skipped
            # ... and the detour is not learned: weather-b would keep the text afterwards
            await wait_until(lambda: _outcomes(m) >= len(seen) + 1, timeout=5)
            healthy.set()
            await wait_until(lambda: breakers.state("weather-a") == "half_open", timeout=5)
            # half-open: weather-a may take a probe again when it is the best choice (its
            # success rate took a small hit, so allow a few tries); the probe closes it
            probes = []
            while not probes or probes[-1] != "weather-a":
                r = await client.request("will it rain in Paris tomorrow", wait_s=20)
                probes.append(r.agent_id)
                assert len(probes) <= 5, probes
            await wait_until(lambda: breakers.state("weather-a") == "closed", timeout=5)
        # the probe's completion is written after the detour's (one flush after another)
        memory = ExampleMemory(conn2.redis, conn2.keys)
        await wait_until(lambda: _completed(memory, "weather-a"), timeout=10)
        assert not await _has_text(memory, "weather-b", "will it rain in Paris tomorrow")
        assert (await memory.load("weather-b")).completed >= 1
    finally:
        await m.close()


async def _completed(memory: ExampleMemory, agent_id: str) -> bool:
    return (await memory.load(agent_id)).completed >= 1


def _outcomes(m: SemanticMesh) -> int:
    assert m.selector is not None
    return m.selector.ledger.outcomes()


@pytest.mark.access_off(
    "the caller is the admin; feedback counts only from a client user (test_access_feedback)"
)
async def test_feedback_teaches_and_penalises(mesh: SemanticMesh, conn: MeshConnection) -> None:
    await mesh.start(REFUNDS, LOGISTICS)
    async with MeshClient(conn) as client:
        good = await client.request("my parcel was left at the wrong address", wait_s=20)
        bad = await client.request("the courier lost my package", wait_s=20)
        assert good.agent_id == bad.agent_id == "logistics"
        memory = ExampleMemory(conn.redis, conn.keys)
        # completed tasks are learned on their own; bad feedback takes one back out
        await wait_until(
            lambda: _has_text(memory, "logistics", "the courier lost my package"), timeout=30
        )
        assert await client.feedback(good.task_id, good=True) == "logistics"
        assert await client.feedback(bad.task_id, good=False) == "logistics"
        await client.feedback(bad.task_id, good=False)  # counted once only
    loaded = await memory.load("logistics")
    assert loaded.texts.count("my parcel was left at the wrong address") == 1
    assert "the courier lost my package" not in loaded.texts
    assert loaded.bad == 1 and loaded.good == 1


@pytest.mark.access_off("runs the CLI with the default login")
async def test_mesh_explain_prints_the_ranked_table(mesh: SemanticMesh, settings: Settings) -> None:
    await mesh.start(REFUNDS, LOGISTICS)

    async def explain() -> dict[str, Any]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "mesh.cli.main",
            "explain",
            "where is my package?",
            "--json",
            env={**os.environ, "MESH_NAMESPACE": settings.namespace},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 0, err.decode()
        found: dict[str, Any] = json.loads(out)
        return found

    # the CLI ranks the agents live when it looks: with this test's 1.5 s leases a loaded
    # machine can show one lapsed for a moment, so it looks again until both are live (30 s)
    deadline = asyncio.get_running_loop().time() + 30.0
    report = await explain()
    while len(report["candidates"]) != 2 and asyncio.get_running_loop().time() < deadline:
        report = await explain()
    assert report["chosen"] == "logistics"
    assert [c["agent_id"] for c in report["candidates"]] == ["logistics", "refunds"]
    assert "logistics wins" in report["reason"]
    assert {"similarity", "semantic", "load", "idle", "history", "total"} <= set(
        report["candidates"][0]
    )


async def test_a_text_one_router_learned_reaches_the_other_without_a_reload(
    mesh: SemanticMesh, conn: MeshConnection, embedder: Embedder
) -> None:
    from mesh.router.lexical import grams

    await mesh.start(REFUNDS, LOGISTICS)
    first = mesh.selector
    assert first is not None
    second, stop_second = await build_selector(conn, embedder)
    try:
        await second.wait_routable(["refunds", "logistics"], timeout=ROUTABLE_S)
        before = second.index.entry("refunds").learned_texts
        rows, postings = second.index.rows_refreshed, second.index._lexical.postings_changed
        text = "the refund for my cancelled order never reached my card"
        async with MeshClient(conn) as client:
            r = await client.request(text, wait_s=20)
        assert r.output == {"by": "refunds"}
        # the routing router learned it from Redis' answer; the other applied its event
        await wait_until(lambda: second.keeper.learned_elsewhere == 1, timeout=30)
        learned = second.index.entry("refunds").learned_texts
        assert set(learned.values()) - set(before.values()) == {text}
        assert learned == first.index.entry("refunds").learned_texts
        assert second.index.rows_refreshed - rows == 1
        assert second.index._lexical.postings_changed - postings == len(grams(text))
        np.testing.assert_allclose(
            second.index.entry("refunds").learned[next(iter(learned))],
            embedder.embed([text])[0],
            atol=1e-6,
        )
    finally:
        await stop_second()


async def test_a_dispatch_that_failed_leaves_load_breaker_and_learning_untouched(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS)
    selector = mesh.selector
    assert selector is not None
    # the agent is registered and live, but its queue is gone: the publish is returned
    channel = await conn.channel()
    for queue, _ in conn.topology.agent_queues("refunds"):
        await channel.queue_delete(queue)
    await channel.close()
    load_before = selector.index.stats("refunds").load
    async with MeshClient(conn) as client:
        r = await client.request("can I get my money back for the phone", wait_s=20)
    assert r.status == "unroutable"
    assert selector.index.stats("refunds").load == load_before
    assert selector.breakers.state("refunds") == "closed"
    assert (
        not selector.breakers._breakers.get("refunds")
        or not selector.breakers._breakers["refunds"].probing
    )
    assert not selector.ledger.pending
    assert await conn.redis.exists(conn.keys.outcome(r.task_id)) == 0


async def test_outcomes_reach_only_the_dispatching_router_and_its_counts_the_others(
    mesh: SemanticMesh, conn: MeshConnection, embedder: Embedder
) -> None:
    """Router work grows with its own tasks: an outcome is delivered to the router that
    dispatched the task (tagged ``task.completed.<tag>``); the others count it from that
    router's ``route.counts``."""
    await mesh.start(REFUNDS, LOGISTICS)
    first = mesh.selector
    assert first is not None
    second, stop_second = await build_selector(conn, embedder)
    try:
        await second.wait_routable(["refunds", "logistics"], timeout=ROUTABLE_S)
        texts = ["can I get my money back", "where is my package"] * 3
        async with MeshClient(conn) as client:
            results = await asyncio.gather(*(client.request(t, wait_s=20) for t in texts))
        assert [r.status for r in results] == ["completed"] * len(texts)
        assert {r.route.router for r in results if r.route} == {first.outcome_tag}
        want = {"refunds": 3, "logistics": 3}

        def counted() -> dict[str, dict[str, int]]:
            return {
                "first": {a: first.ledger.completed(a) for a in want},
                "second": {a: second.ledger.completed(a) for a in want},
            }

        try:
            await wait_until(lambda: counted() == {"first": want, "second": want}, timeout=30)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: counted {counted()}, second applied {second.keeper.counts_applied} "
                f"route.counts, first took {first.keeper.outcome_events} outcomes"
            ) from None
        assert first.keeper.outcome_events == len(texts)
        assert second.keeper.outcome_events == 0  # none of the first router's outcomes
        assert second.keeper.counts_applied >= 1
        assert second.ledger.success_rate("refunds") == first.ledger.success_rate("refunds")
    finally:
        await stop_second()
