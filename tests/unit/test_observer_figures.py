"""Per-agent figures from events, and the hop tree `mesh trace` prints."""

from __future__ import annotations

from typing import Any

from mesh.clock import ManualClock
from mesh.config import Settings
from mesh.observer.figures import Figures, percentile, summary
from mesh.observer.store import TaskRecord
from mesh.observer.tree import build_trace
from mesh.schemas import Event


def ev(type_: str, ts: int, task: str, agent: str | None = None, **data: Any) -> Event:
    return Event(type=type_, ts_ms=ts, trace_id="tr", task_id=task, agent_id=agent, data=data)


def decided(ts: int, task: str, agent: str, strategy: str = "semantic", **data: Any) -> Event:
    route = {"strategy": strategy, "score": 0.8, "low_confidence": False}
    return ev("route.decision", ts, task, agent, route=route, timings={"route_ms": 2.5}, **data)


def test_percentiles_by_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert (percentile(values, 50), percentile(values, 90), percentile(values, 99)) == (
        50.0,
        90.0,
        99.0,
    )
    assert percentile([], 50) is None
    assert summary([7.0]) == {"count": 1, "p50": 7.0, "p90": 7.0, "p99": 7.0}


def test_figures_per_agent() -> None:
    figures = Figures(Settings(), clock=ManualClock())
    for i in range(4):
        figures.observe(decided(1_000 * i, f"ok{i}", "refunds"))
        figures.observe(ev("task.completed", 1_000 * i + 100 + i, f"ok{i}", "refunds"))
    figures.observe(decided(9_000, "bad", "refunds", "bid"))
    figures.observe(ev("task.failed", 9_500, "bad", "refunds", error="boom"))
    figures.observe(ev("task.rerouting", 9_600, "other", None, from_agent="refunds"))
    figures.observe(ev("route.decision", 9_700, "lost", None, route=None))
    figures.observe(ev("task.unroutable", 9_701, "lost", None, code="no_agent"))
    snap = figures.snapshot()
    agent = snap["agents"]["refunds"]
    assert agent["tasks"] == {"completed": 4, "failed": 1}
    assert agent["success_rate"] == 0.8
    assert agent["latency_ms"] == {"count": 5, "p50": 102.0, "p90": 500.0, "p99": 500.0}
    assert agent["route_ms"]["p50"] == 2.5
    assert (agent["reroutes"], agent["bids_won"]) == (1, 1)
    assert agent["chosen"] == {"bid": 1, "semantic": 4}
    assert agent["breaker"] == "closed"
    assert (snap["decisions"], snap["no_match"], snap["unroutable"]) == (6, 1, 1)


def test_a_latency_counts_when_the_outcome_arrives_before_its_decision() -> None:
    # the router and the worker publish on connections of their own: either comes first
    figures = Figures(Settings(), clock=ManualClock())
    figures.observe(ev("task.completed", 1_180, "late", "refunds"))
    figures.observe(decided(1_000, "late", "refunds"))
    figures.observe(decided(2_000, "usual", "refunds"))
    figures.observe(ev("task.completed", 2_040, "usual", "refunds"))
    # an outcome by another agent than the late decision names gives no latency
    figures.observe(ev("task.completed", 3_500, "moved", "refunds"))
    figures.observe(decided(3_000, "moved", "orders"))
    agent = figures.snapshot()["agents"]["refunds"]
    assert agent["tasks"] == {"completed": 3}
    assert agent["latency_ms"] == {"count": 2, "p50": 40.0, "p90": 180.0, "p99": 180.0}
    assert figures.snapshot()["agents"]["orders"]["latency_ms"]["count"] == 0


def test_the_breaker_mirror_opens_like_the_routers() -> None:
    clock = ManualClock()
    figures = Figures(Settings(breaker_min_calls=4, breaker_failure_ratio=0.5), clock=clock)
    for i in range(4):
        figures.observe(ev("task.failed", i, f"f{i}", "flaky", error="backend_down"))
    assert figures.snapshot()["agents"]["flaky"]["breaker"] == "open"
    # an expiry in the queue is not the agent's fault (the routers do not count it)
    other = Figures(Settings(breaker_min_calls=4), clock=clock)
    for i in range(4):
        other.observe(ev("task.expired", i, f"e{i}", "slow", error="expired_in_queue"))
    assert other.snapshot()["agents"]["slow"]["breaker"] == "closed"


def record(task_id: str, history: list[tuple[str, int]], result: dict[str, Any]) -> TaskRecord:
    return TaskRecord(
        task_id,
        {"state": history[-1][0], "trace_id": "tr"},
        [{"state": s, "ts_ms": ts, "by": "x", "note": ""} for s, ts in history],
        result,
    )


def test_two_hops_nest_by_time_with_their_timings() -> None:
    events = [
        decided(1_000, "parent", "ping", "target"),
        ev("task.completed", 1_300, "parent", "ping"),
        decided(1_100, "child", "pong", "target"),
        ev("task.completed", 1_200, "child", "pong"),
    ]
    records = {
        "parent": record(
            "parent",
            [
                ("submitted", 995),
                ("routing", 995),
                ("dispatched", 996),
                ("accepted", 1_010),
                ("processing", 1_010),
                ("completed", 1_300),
            ],
            {"status": "completed", "instance_id": "ping-1", "timings": {"handler_ms": 280.0}},
        ),
        "child": record(
            "child",
            [
                ("submitted", 1_099),
                ("routing", 1_099),
                ("dispatched", 1_100),
                ("accepted", 1_120),
                ("processing", 1_120),
                ("completed", 1_200),
            ],
            {"status": "completed", "instance_id": "pong-1", "timings": {"handler_ms": 75.0}},
        ),
    }
    trace = build_trace("tr", events, records)
    (root,) = trace.roots
    assert (root.task_id, root.agent_id, root.instance_id) == ("parent", "ping", "ping-1")
    (child,) = root.children
    assert (child.task_id, child.agent_id, child.instance_id, child.strategy) == (
        "child",
        "pong",
        "pong-1",
        "target",
    )
    assert child.timings == {
        "route_ms": 2.5,
        "handler_ms": 75.0,
        "queue_ms": 20.0,
        "total_ms": 101.0,
    }
    assert [s.state for s in child.steps][-1] == "completed"
    assert [h.task_id for h in trace.hops()] == ["parent", "child"]
    out = trace.as_dict()
    assert out["hops"][0]["handoffs"][0]["agent_id"] == "pong"


def test_a_named_parent_and_deadlines_show_the_halved_budget() -> None:
    events = [
        decided(1_000, "p", "a", deadline_ms=31_000),
        decided(2_000, "c", "b", parent_task_id="p", deadline_ms=16_500, hops=1),
    ]
    trace = build_trace("tr", events, {})
    (parent,) = trace.roots
    (child,) = parent.children
    assert child.budget_ms == 14_500 and child.hops == 1
    assert trace.as_dict()["hops"][0]["handoffs"][0]["parent_left_ms"] == 29_000


def test_sequential_handoffs_are_siblings_not_a_chain() -> None:
    events = [
        decided(1_000, "p", "a"),
        ev("task.completed", 2_000, "p", "a"),
        decided(1_100, "c1", "b"),
        ev("task.completed", 1_200, "c1", "b"),
        decided(1_300, "c2", "c"),
        ev("task.completed", 1_400, "c2", "c"),
    ]
    (root,) = build_trace("tr", events, {}).roots
    assert [c.task_id for c in root.children] == ["c1", "c2"]
