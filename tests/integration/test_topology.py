"""The declared topology matches the export, and the management API shows all of it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from mesh.cli.topology import render
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.management import Management
from mesh.topology import Topology

ROOT = Path(__file__).resolve().parents[2]


def test_committed_definitions_match_the_declared_topology() -> None:
    committed = (ROOT / "infra" / "definitions.json").read_bytes()
    assert committed == render(Settings()), "run `mesh topology export`"


@pytest.mark.integration
async def test_management_api_shows_every_exchange_and_queue(
    conn: MeshConnection, management: Management
) -> None:
    topology = conn.topology
    channel = await conn.channel()
    await topology.declare(channel)
    await topology.declare(channel, topology.agent_spec("refund"))
    definitions = topology.definitions()

    exchanges = {e["name"]: e for e in await asyncio.to_thread(management.exchanges)}
    for ex in definitions["exchanges"]:
        shown = exchanges[ex["name"]]
        assert shown["type"] == ex["type"]
        assert shown["durable"] is True
        assert shown["arguments"] == ex["arguments"]

    queues = {q["name"]: q for q in await asyncio.to_thread(management.queues)}
    for q in definitions["queues"]:
        assert queues[q["name"]]["arguments"] == q["arguments"], q["name"]
    # no priority queue: the band a task's priority falls in is its queue
    for band in ("high", "normal", "low"):
        agent_q = queues[topology.agent_queue("refund", band)]
        assert agent_q["arguments"] == {"x-dead-letter-exchange": topology.dlx}
        assert queues[topology.router_band_queue(band)]["arguments"] == {}
    retry = queues[topology.retry_queue(topology.retry_delays_ms[0])]
    assert retry["arguments"]["x-message-ttl"] == topology.retry_delays_ms[0]
    assert retry["arguments"]["x-dead-letter-exchange"] == topology.capabilities


@pytest.mark.integration
async def test_declaration_is_idempotent(conn: MeshConnection) -> None:
    channel = await conn.channel()
    for _ in range(2):
        await conn.topology.declare(channel)


def test_both_queue_modes_have_a_queue_per_band() -> None:
    for mode in ("classic", "quorum"):
        topology = Topology(namespace="q", queue_type=mode)  # type: ignore[arg-type]
        spec = topology.agent_spec("a")
        assert [q.name for q in spec.queues] == [
            "q.agent.a.high",
            "q.agent.a.normal",
            "q.agent.a.low",
        ]
        routers = [q.name for q in topology.static_spec().queues if ".router." in q.name]
        assert routers == ["q.router.high", "q.router.normal", "q.router.low"]
        assert topology.ingress_band_key(9) == "task.high"
        assert topology.ingress_band_key(1) == "task.low"
        bound = {
            (b.exchange, b.routing_key)
            for b in topology.static_spec().bindings
            if b.queue == "q.router.normal"
        }
        # the bare key too (a publisher that names no band), and dispatches coming back
        assert bound == {
            ("q.ingress", "task"),
            ("q.ingress", "task.normal"),
            ("q.dlx", "agent.#.normal"),
            ("q.dlx", "*.agent.#.normal"),
        }


def test_quorum_topology_keeps_priority_with_bands() -> None:
    topology = Topology(namespace="q", queue_type="quorum")
    spec = topology.agent_spec("a")
    assert [q.name for q in spec.queues] == ["q.agent.a.high", "q.agent.a.normal", "q.agent.a.low"]
    for q in spec.queues:
        assert "x-max-priority" not in q.arguments
        assert q.arguments["x-queue-type"] == "quorum"
        assert q.arguments["x-delivery-limit"] == 5
    assert topology.agent_routing_key("a", 9) == "agent.a.high"
    assert topology.agent_of_routing_key("agent.a.b.low") == "a.b"
