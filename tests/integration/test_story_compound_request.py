"""Story: a request carrying two intents gets one merged Result with both agents' parts."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import mesh
from mesh.cli.explain import examine
from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.router.merge import PARTIAL_FAILURE
from mesh.schemas import TaskEnvelope
from tests.integration.routing_kit import EventTap, SemanticMesh, agent

pytestmark = pytest.mark.integration


def _echo(agent_id: str) -> Any:
    def reply(task: TaskEnvelope) -> dict[str, Any]:
        return {"by": agent_id, "asked": task.capability, "parent": task.parent_task_id}

    return reply


def _refuse(task: TaskEnvelope) -> dict[str, Any]:
    raise mesh.Reject("no stock data today")


REFUNDS = agent(
    "refunds",
    "Handles returns, refunds and exchanges of purchased products. Needs an order id.",
    [
        "I want to return the phone I bought last month",
        "can I get my money back",
        "这个商品我想退货",
    ],
    reply=_echo("refunds"),
)
LOGISTICS = agent(
    "logistics",
    "Tracks parcels and deliveries: shipping status, delivery dates, lost packages.",
    ["where is my package", "my order has not arrived yet", "我的快递到哪了"],
    reply=_echo("logistics"),
)
PRESALES = agent(
    "presales",
    "Answers questions before a purchase: product features, prices, stock.",
    ["does this laptop support two monitors", "is the blue one in stock", "这款耳机有降噪吗"],
    reply=_refuse,
)


async def test_compound_requests_get_one_merged_result(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS, LOGISTICS, PRESALES)
    tap = await EventTap(conn, "route.decision").start()
    cases = {
        "where is my package? also I want to return the phone I bought last month": [
            "logistics",
            "refunds",
        ],
        "我的快递到哪了？另外这个商品我想退货": ["logistics", "refunds"],
    }
    async with MeshClient(conn) as client:
        results = await asyncio.gather(*(client.request(t, wait_s=30) for t in cases))
        single = await client.request("can I get my money back", wait_s=30)
    for (text, agents), result in zip(cases.items(), results, strict=True):
        assert result.status == "completed", (text, result)
        assert result.output is not None
        parts = result.output["parts"]
        assert [p["agent_id"] for p in parts] == agents, (text, parts)
        assert [p["output"]["by"] for p in parts] == agents
        assert all(p["status"] == "completed" for p in parts)
        assert all(p["output"]["parent"] == result.task_id for p in parts)
        # each part got its own words, in order, and together they are the request
        assert all(p["output"]["asked"] == p["text"] and p["text"] in text for p in parts)
        assert text.index(parts[0]["text"]) < text.index(parts[1]["text"])
    # a single intent is routed as one task, no parts
    assert single.status == "completed" and single.output is not None
    assert single.output["by"] == "refunds" and "parts" not in single.output
    # the children's decisions record the split
    first = results[0]
    assert first.output is not None
    child_ids = [p["task_id"] for p in first.output["parts"]]

    def decisions() -> list[Any]:
        return [e for e in tap.events if e.task_id in child_ids]

    for _ in range(100):
        if len(decisions()) == 2:
            break
        await asyncio.sleep(0.05)
    assert len(decisions()) == 2
    for event in decisions():
        compound = event.data["compound"]
        assert compound["parent_task_id"] == first.task_id
        assert [p["agent_id"] for p in compound["parts"]] == ["logistics", "refunds"]
    # the parent's record is the mesh's: finished with the merged Result
    state = await conn.redis.hgetall(conn.keys.task(first.task_id))
    assert state[b"state"] == b"completed"


async def test_a_failed_part_is_named_and_the_others_kept(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS, LOGISTICS, PRESALES)
    text = "is the blue one in stock? also where is my package"
    async with MeshClient(conn) as client:
        result = await client.request(text, wait_s=30)
    assert result.status == "failed", result
    assert result.error is not None and result.error.code == PARTIAL_FAILURE
    # the part's agent rejected it, and a child targets its agent: nobody else may take it
    assert "part 1 (presales): unroutable, target_excluded" in result.error.message
    assert result.error.details == {"failed": [0], "completed": [1]}
    assert result.output is not None and result.output["partial"] is True
    parts = result.output["parts"]
    assert [p["status"] for p in parts] == ["unroutable", "completed"]
    assert parts[1]["output"]["by"] == "logistics"


async def test_explain_shows_the_clauses_and_the_child_tasks(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS, LOGISTICS, PRESALES)
    assert mesh.selector is not None
    text = "where is my package? also I want to return the phone I bought last month"
    found = await examine(mesh.selector, text, {}, [], conn.settings)
    assert found.split is not None
    report = found.as_json(limit=5)["compound"]
    assert report["dispatch"] == "child_tasks"
    assert [c["agent_id"] for c in report["clauses"]] == ["logistics", "refunds"]
    assert [c["text"] for c in report["clauses"]] == [
        "where is my package",
        "I want to return the phone I bought last month",
    ]
    assert all(c["intent"] and c["confidence"] >= found.floor for c in report["clauses"])
    assert [p["agent_id"] for p in report["parts"]] == ["logistics", "refunds"]
    lines = "\n".join(found.lines(limit=5))
    assert "compound request: 2 intents, dispatched as 2 child tasks" in lines
    assert "p1. logistics" in lines and "p2. refunds" in lines
    # a single intent: the table alone, as before
    single = await examine(mesh.selector, "can I get my money back", {}, [], conn.settings)
    assert single.split is None and single.decision.agent_id == "refunds"
    assert single.as_json(limit=5)["compound"] is None
    assert "compound" not in "\n".join(single.lines(limit=5))
    # multi-intent off: explain shows the one task a router would route
    off = conn.settings.model_copy(update={"multi_intent": False})
    whole = await examine(mesh.selector, text, {}, [], off)
    assert whole.split is None and whole.decision.agent_id is not None


async def test_multi_intent_off_routes_a_compound_request_as_one_task(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    conn.settings = conn.settings.model_copy(update={"multi_intent": False})
    await mesh.start(REFUNDS, LOGISTICS, PRESALES)
    text = "where is my package? also I want to return the phone I bought last month"
    async with MeshClient(conn) as client:
        result = await client.request(text, wait_s=30)
    assert result.status == "completed", result
    assert result.output is not None and "parts" not in result.output
    # one agent got the whole text, as the task itself (no parent, no child)
    assert result.output["by"] in {"logistics", "refunds"}
    assert result.output["asked"] == text
    assert result.output["parent"] is None
    state = await conn.redis.hgetall(conn.keys.task(result.task_id))
    assert state[b"state"] == b"completed"
    assert await conn.redis.exists(conn.keys.compound(result.task_id)) == 0
