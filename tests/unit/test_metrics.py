"""`mesh.metrics`: names, pre-bound recording, scrape-time families, queue labels, settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from mesh.config import Settings
from mesh.errors import ServiceUnavailable
from mesh.metrics import DISPATCHED_HEADER, Metrics, QueueDepthCollector, dispatch_headers
from mesh.metrics.names import PREFIX, RECORDED, SCRAPED
from mesh.metrics.queues import queue_label
from mesh.registry.state import AgentState, InstanceState
from mesh.router.breaker import BreakerBoard
from mesh.router.embedding import CacheStats
from mesh.schemas import now_ms
from mesh.topology import Topology


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the registry's exposition, parsed back: (name, labels) -> value."""
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return samples(metrics).get((name, tuple(sorted(labels.items()))))


def test_every_name_follows_the_conventions() -> None:
    names = [f.name for f in (*RECORDED.values(), *SCRAPED.values())]
    assert len(names) == len(set(names))
    for f in (*RECORDED.values(), *SCRAPED.values()):
        assert f.name.startswith(f"{PREFIX}_"), f.name
        assert not f.name.endswith("_total"), f.name  # the client adds it to counters
        assert ("seconds" in f.name) == (f.kind == "histogram" or "cpu_seconds" in f.name)
        assert "task_id" not in f.labels and "trace_id" not in f.labels


def test_two_processes_in_one_interpreter_do_not_collide() -> None:
    a, b = Metrics(role="router"), Metrics(role="worker")
    a.dispatched("billing", "semantic", 0.002)
    assert value(a, "agent_reach_dispatches_total", agent="billing", strategy="semantic") == 1
    assert value(b, "agent_reach_dispatches_total", agent="billing", strategy="semantic") is None
    assert value(b, "agent_reach_process_info", role="worker", namespace="") == 1


def test_recording_binds_each_label_set_once() -> None:
    m = Metrics(role="router", process=False)
    for _ in range(3):
        m.dispatched("billing", "semantic", 0.003)
    m.dispatched("billing", "target", 0.001)
    assert len(m._dispatches) == 2 and len(m._routing) == 2
    assert value(m, "agent_reach_dispatches_total", agent="billing", strategy="semantic") == 3
    assert value(m, "agent_reach_routing_seconds_count", strategy="semantic") == 3
    assert value(m, "agent_reach_routing_seconds_bucket", strategy="target", le="0.001") == 1


def test_reroute_reasons_are_bounded() -> None:
    m = Metrics(role="router", process=False)
    m.rerouted("a", "expired")
    m.rerouted("a", "something a broker invented")
    m.rerouted("a", "unbound")
    assert value(m, "agent_reach_reroutes_total", agent="a", reason="expired") == 1
    assert value(m, "agent_reach_reroutes_total", agent="a", reason="other") == 1
    assert value(m, "agent_reach_reroutes_total", agent="a", reason="unbound") == 1


def test_ended_counts_and_times_from_ingress() -> None:
    m = Metrics(role="worker", process=False)
    m.ended("completed", "a", "semantic", now_ms() - 2_000)
    m.ended("unroutable")  # a router's own ending: no agent, no strategy, no time
    assert value(m, "agent_reach_tasks_total", agent="a", strategy="semantic", status="completed")
    assert value(m, "agent_reach_tasks_total", agent="", strategy="", status="unroutable") == 1
    e2e = value(m, "agent_reach_end_to_end_seconds_sum", agent="a", status="completed")
    assert e2e is not None and 1.9 < e2e < 10
    assert value(m, "agent_reach_end_to_end_seconds_count", agent="", status="unroutable") is None


def test_queue_wait_only_from_a_stamped_dispatch() -> None:
    m = Metrics(role="worker", process=False)
    m.started("a", None)
    m.started("a", {DISPATCHED_HEADER: "not a number"})
    m.started("a", {DISPATCHED_HEADER: True})
    assert value(m, "agent_reach_queue_wait_seconds_count", agent="a") is None
    m.started("a", {DISPATCHED_HEADER: now_ms() - 500})
    m.started("a", dispatch_headers())
    assert value(m, "agent_reach_queue_wait_seconds_count", agent="a") == 2
    wait = value(m, "agent_reach_queue_wait_seconds_sum", agent="a")
    assert wait is not None and 0.45 < wait < 5


def test_handler_retries_and_dead_letters() -> None:
    m = Metrics(role="worker", process=False)
    m.handled("a", "completed", 0.2)
    m.handled("a", "failed", 0.01)
    m.retried("a")
    m.dead_lettered("retries")
    assert value(m, "agent_reach_handler_seconds_count", agent="a", outcome="completed") == 1
    assert value(m, "agent_reach_handler_seconds_count", agent="a", outcome="failed") == 1
    assert value(m, "agent_reach_retries_total", agent="a") == 1
    assert value(m, "agent_reach_dead_letters_total", reason="retries") == 1


# --- scrape-time families ---------------------------------------------------------------------
@dataclass
class FakeSnapshot:
    agents: list[AgentState]

    def all_agents(self) -> list[AgentState]:
        return list(self.agents)


@dataclass
class FakeEmbedder:
    stats: CacheStats = field(default_factory=lambda: CacheStats(hits=7, misses=3, size=3))


@dataclass
class Counted:
    batches: int = 2
    texts: int = 10
    fits: int = 1
    fit_cpu_s: float = 0.5
    fits_yielded: int = 4


@dataclass
class FakeSelector:
    snapshot: FakeSnapshot
    breakers: BreakerBoard
    embedder: FakeEmbedder = field(default_factory=FakeEmbedder)
    batcher: Counted = field(default_factory=Counted)
    keeper: Counted = field(default_factory=Counted)


@dataclass
class FakeRouter:
    selector: Any
    handled: int = 5
    duplicates: int = 1
    refused: int = 0


def instance(agent_id: str, iid: str, live: bool) -> InstanceState:
    expires = now_ms() + (60_000 if live else -60_000)
    return InstanceState(iid, agent_id, 1, "up", expires)


def agent_state(agent_id: str, *lives: bool) -> AgentState:
    from mesh.schemas import Registration

    reg = Registration(agent_id=agent_id, instance_id=f"{agent_id}-0", capability_text="x")
    state = AgentState(agent_id, reg)
    for n, live in enumerate(lives):
        state.instances[f"{agent_id}-{n}"] = instance(agent_id, f"{agent_id}-{n}", live)
    return state


def test_router_families_read_at_scrape_time() -> None:
    m = Metrics(role="router", process=False)
    breakers = BreakerBoard(min_calls=2, failure_ratio=0.4)
    for _ in range(2):
        breakers.record("flaky", False)
    breakers.record("fine", True)
    snapshot = FakeSnapshot([agent_state("fine", True, True), agent_state("gone", False)])
    router = FakeRouter(FakeSelector(snapshot, breakers))
    m.watch("router", router)
    assert value(m, "agent_reach_router_messages_total") == 5
    assert value(m, "agent_reach_agents_live") == 1
    assert value(m, "agent_reach_instances_live", agent="fine") == 2
    assert value(m, "agent_reach_instances_live", agent="gone") == 0
    assert value(m, "agent_reach_breaker_state", agent="flaky", state="open") == 1
    assert value(m, "agent_reach_breaker_state", agent="flaky", state="closed") == 0
    assert value(m, "agent_reach_breaker_state", agent="fine", state="closed") == 1
    assert value(m, "agent_reach_embedding_cache_hits_total") == 7
    assert value(m, "agent_reach_embedding_cache_misses_total") == 3
    assert value(m, "agent_reach_index_refit_cpu_seconds_total") == 0.5
    assert value(m, "agent_reach_index_refits_yielded_total") == 4
    router.handled = 9  # read live, not copied at watch time
    assert value(m, "agent_reach_router_messages_total") == 9
    m.unwatch("router", router)
    m.unwatch("router", router)  # harmless
    assert value(m, "agent_reach_router_messages_total") is None


def test_a_router_without_semantic_selector_has_only_its_counts() -> None:
    m = Metrics(role="router", process=False)
    m.watch("router", FakeRouter(selector=object()))
    assert value(m, "agent_reach_router_messages_total") == 5
    assert value(m, "agent_reach_agents_live") is None


@dataclass
class FakeAgent:
    agent_id: str
    max_concurrency: int = 4


@dataclass
class FakeWorker:
    agent: FakeAgent
    in_flight: int = 1
    deliveries: int = 10


@dataclass
class FakeRegistry:
    stats: dict[str, int]
    leases_live: int | None = None


def test_worker_and_registry_families_sum_per_process() -> None:
    m = Metrics(role="mesh", process=False)
    m.watch("worker", FakeWorker(FakeAgent("a")))
    m.watch("worker", FakeWorker(FakeAgent("a"), in_flight=2))
    m.watch("worker", FakeWorker(FakeAgent("b", 1), in_flight=0))
    stats = {"registered": 3, "heartbeats": 40, "lost": 1, "down": 2, "batches": 5, "refused": 0}
    m.watch("registry", FakeRegistry(stats))
    assert value(m, "agent_reach_worker_in_flight", agent="a") == 3
    assert value(m, "agent_reach_worker_slots", agent="a") == 8
    assert value(m, "agent_reach_worker_deliveries_total", agent="b") == 10
    assert value(m, "agent_reach_registry_heartbeats_total") == 40
    assert value(m, "agent_reach_registry_leases_live") is None  # not counted yet
    m.watch("registry", FakeRegistry(stats, leases_live=3))
    assert value(m, "agent_reach_registry_leases_live") == 3
    assert value(m, "agent_reach_registry_heartbeats_total") == 80


# --- queue depths -----------------------------------------------------------------------------
def test_queue_labels_are_bounded() -> None:
    topo = Topology(namespace="prod")
    assert queue_label(topo, {"name": "other.router"}) is None
    assert queue_label(topo, {"name": "prod.router"}) == "prod.router"
    assert queue_label(topo, {"name": topo.agent_queue("billing")}) == "prod.agent.billing"
    assert queue_label(topo, {"name": topo.dead_queue("expired")}) == "prod.dead.expired"
    assert queue_label(topo, {"name": topo.reply_queue("c-1a2b")}) == "prod.reply.*"
    assert queue_label(topo, {"name": topo.bid_queue("x")}) == "prod.bids.*"
    assert queue_label(topo, {"name": topo.session_queue("a-1")}) == "prod.session.*"
    tap = {"name": "prod.benchtap.1234", "exclusive": True}
    assert queue_label(topo, tap) == "prod.benchtap.*"


class FakeManagement:
    def __init__(self, queues: list[dict[str, Any]]) -> None:
        self.rows = queues
        self.reads = 0
        self.down = False

    def queues(self) -> list[dict[str, Any]]:
        self.reads += 1
        if self.down:
            raise ServiceUnavailable("RabbitMQ management API", "http://x", "start it")
        return self.rows


def test_queue_depths_summed_per_label_and_cached() -> None:
    topo = Topology(namespace="prod")
    mgmt = FakeManagement(
        [
            {"name": "prod.router", "messages_ready": 4, "messages_unacknowledged": 1},
            {"name": "prod.reply.a", "messages_ready": 2, "consumers": 1},
            {"name": "prod.reply.b", "messages_ready": 3, "consumers": 1},
            {"name": "elsewhere.router", "messages_ready": 99},
        ]
    )
    m = Metrics(role="observer", process=False)
    collector = QueueDepthCollector(mgmt, topo, max_age_s=60)  # type: ignore[arg-type]
    m.registry.register(collector)
    assert value(m, "agent_reach_queue_messages_ready", queue="prod.router") == 4
    assert value(m, "agent_reach_queue_messages_unacked", queue="prod.router") == 1
    assert value(m, "agent_reach_queue_messages_ready", queue="prod.reply.*") == 5
    assert value(m, "agent_reach_queue_consumers", queue="prod.reply.*") == 2
    assert value(m, "agent_reach_queue_messages_ready", queue="elsewhere.router") is None
    assert value(m, "agent_reach_management_up") == 1
    assert mgmt.reads == 1  # the second scrape was served from the last read


def test_queue_depths_say_when_the_api_is_away() -> None:
    mgmt = FakeManagement([{"name": "prod.router", "messages_ready": 4}])
    mgmt.down = True
    m = Metrics(role="observer", process=False)
    m.registry.register(QueueDepthCollector(mgmt, Topology(namespace="prod"), max_age_s=0))  # type: ignore[arg-type]
    assert value(m, "agent_reach_management_up") == 0
    assert value(m, "agent_reach_queue_messages_ready", queue="prod.router") is None


# --- settings ---------------------------------------------------------------------------------
def test_metrics_settings_from_env() -> None:
    assert Settings.from_env({}).metrics_port is None
    assert Settings.from_env({"MESH_METRICS_PORT": ""}).metrics_port is None
    s = Settings.from_env({"MESH_METRICS_PORT": "0", "MESH_METRICS_HOST": "0.0.0.0"})
    assert (s.metrics_port, s.metrics_host) == (0, "0.0.0.0")
    assert Settings.from_env({}).metrics_host == "127.0.0.1"
    with pytest.raises(ValueError, match="MESH_METRICS_PORT"):
        Settings.from_env({"MESH_METRICS_PORT": "70000"})
