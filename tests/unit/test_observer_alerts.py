"""The observer's alert rules: raised once per condition, cleared, never repeated."""

from __future__ import annotations

import dataclasses
from typing import Any

from mesh.observer.alerts import Alert, AlertRules, QueueWatch, Thresholds
from mesh.observer.windows import CountWindow, GrowthWindow, RatioWindow
from mesh.schemas import Event
from mesh.topology import Topology

TOPOLOGY = Topology(namespace="obs")
T = Thresholds(
    window_s=10,
    min_samples=5,
    no_match_ratio=0.2,
    arbitration_ratio=0.15,
    flap_count=3,
    flap_window_s=60,
    dead_letter_growth=3,
    dead_letter_window_s=30,
)


def rules(**kw: Any) -> AlertRules:
    return AlertRules(dataclasses.replace(T, **kw), QueueWatch.from_topology(TOPOLOGY))


def decision(
    ts: int,
    strategy: str | None,
    *,
    agent: str | None = "a",
    trace: str | None = None,
    task: str = "t",
) -> Event:
    """A decision; each task its own trace unless `trace` is given."""
    route = None if strategy is None else {"strategy": strategy, "score": 0.9}
    return Event(
        type="route.decision",
        ts_ms=ts,
        trace_id=trace or f"trace-{task}",
        task_id=task,
        agent_id=agent if strategy is not None else None,
        data={"route": route},
    )


def kinds(alerts: list[Alert]) -> list[tuple[str, str]]:
    return [(a.kind, a.state) for a in alerts]


def test_windows_expire_by_time() -> None:
    w = RatioWindow(1.0)
    w.add(1_000, True)
    w.add(1_500, False)
    assert (w.count, w.hits, w.ratio()) == (2, 1, 0.5)
    w.expire(2_000)
    assert (w.count, w.hits) == (1, 0)
    w.expire(10_000)
    assert w.ratio() is None
    c = CountWindow(1.0)
    for ts in (0, 100, 900):
        c.add(ts)
    c.expire(1_050)
    assert c.count == 2
    g = GrowthWindow(10.0)
    for ts, level in ((0, 5), (2_000, 2), (4_000, 7)):
        g.add(ts, level)
    assert g.growth() == 5 and g.level == 7  # from the lowest point, not the first


def test_no_match_burst_raises_once_and_clears_when_the_share_drops() -> None:
    r = rules()
    out: list[Alert] = []
    for i in range(4):
        out += r.on_event(decision(1_000 + i, None, task=f"n{i}"))
    assert out == []  # fewer than min_samples: not judged yet
    out += r.on_event(decision(1_010, None, task="n5"))
    assert kinds(out) == [("no_match", "raised")]
    raised = out[0]
    assert raised.data["decisions"] == 5 and raised.data["ratio"] == 1.0
    assert "100% of 5 decisions" in raised.message
    # more of the same changes nothing: one alert per condition
    for i in range(10):
        assert r.on_event(decision(1_100 + i, None, task=f"m{i}")) == []
    # matches bring the share down: 15 misses of 75 is 20 %, not above
    cleared: list[Alert] = []
    for i in range(60):
        cleared += r.on_event(decision(1_200 + i, "semantic", task=f"s{i}"))
    assert kinds(cleared) == [("no_match", "cleared")]
    assert cleared[0].message.startswith("cleared: ")


def test_fallback_counts_as_no_match_and_targets_count_in_neither_rate() -> None:
    r = rules()
    for i in range(20):
        assert r.on_event(decision(1_000 + i, "target", task=f"x{i}")) == []
    assert r.no_match.count == 0 and r.arbitration.count == 0
    out: list[Alert] = []
    for i in range(5):
        out += r.on_event(decision(2_000 + i, "fallback", task=f"f{i}"))
    assert kinds(out) == [("no_match", "raised")]


def test_a_no_match_alert_clears_when_its_window_empties() -> None:
    r = rules()
    for i in range(5):
        r.on_event(decision(1_000 + i, None, task=f"n{i}"))
    assert "no_match:mesh" in r.book.active
    assert r.tick(5_000) == []  # still in the window
    assert kinds(r.tick(20_000)) == [("no_match", "cleared")]
    assert r.tick(30_000) == []


def test_arbitration_share_above_threshold() -> None:
    r = rules()
    out: list[Alert] = []
    for i in range(8):
        out += r.on_event(decision(1_000 + i, "semantic", task=f"s{i}"))
    for i in range(2):  # 2 of 10 = 20 % > 15 %
        out += r.on_event(decision(1_100 + i, "arbitration", task=f"a{i}"))
    assert kinds(out) == [("arbitration", "raised")]
    assert "needed arbitration" in out[0].message


def test_a_trace_revisiting_an_agent_raises_one_loop_alert() -> None:
    r = rules()
    out: list[Alert] = []
    for i, agent in enumerate(["ping", "pong", "ping", "pong", "ping"]):
        out += r.on_event(decision(1_000 + i, "target", agent=agent, trace="tr", task=f"t{i}"))
    assert kinds(out) == [("loop", "raised")]
    loop = out[0]
    assert loop.agent_id == "ping" and loop.trace_id == "tr" and loop.data["visits"] == 3
    assert loop.published and loop.event("observer-1").type == "alert.loop"
    assert loop.event("observer-1").data["state"] == "raised"


def test_a_redelivered_decision_of_one_task_is_not_a_revisit() -> None:
    r = rules()
    for _ in range(5):
        assert r.on_event(decision(1_000, "target", agent="a", trace="tr", task="same")) == []


def test_a_workers_loop_alert_is_relayed_not_republished_and_not_doubled() -> None:
    r = rules()
    worker = Event(
        type="alert.loop",
        trace_id="tr",
        task_id="t4",
        agent_id="ping",
        instance_id="ping-1",
        data={"visits": 3, "trajectory": ["ping", "pong", "ping"], "hops": 2},
    )
    (relayed,) = r.on_event(worker)
    assert relayed.source == "worker" and not relayed.published
    assert "ping-1" in relayed.message
    # the observer's own count of the same revisit raises nothing more
    out: list[Alert] = []
    for i in range(3):
        out += r.on_event(decision(2_000 + i, "target", agent="ping", trace="tr", task=f"p{i}"))
    assert out == []
    # an alert published by an observer is not taken in again
    ours = relayed.event("observer-x")
    assert r.on_event(ours.model_copy(update={"trace_id": "other"})) == []


def test_flapping_agent_raised_once_and_cleared_after_the_window() -> None:
    r = rules()

    def ev(kind: str, ts: int, reason: str = "lease_expired") -> Event:
        return Event(
            type=kind, ts_ms=ts, agent_id="fl", instance_id="fl-1", data={"reason": reason}
        )

    out: list[Alert] = []
    for n in range(4):
        out += r.on_event(ev("agent.down", 1_000 + n * 1_000))
        out += r.on_event(ev("agent.up", 1_500 + n * 1_000))
    assert kinds(out) == [("flapping", "raised")]
    assert out[0].agent_id == "fl" and out[0].data["bounces"] == 3
    assert r.tick(30_000) == []
    assert kinds(r.tick(200_000)) == [("flapping", "cleared")]


def test_clean_restarts_are_not_flapping() -> None:
    r = rules()
    out: list[Alert] = []
    for n in range(5):
        down = Event(
            type="agent.down", ts_ms=1_000 + n, agent_id="ok", data={"reason": "deregistered"}
        )
        out += r.on_event(down)
        out += r.on_event(Event(type="agent.up", ts_ms=1_001 + n, agent_id="ok"))
    assert out == []


def row(name: str, messages: int = 0, consumers: int = 0) -> dict[str, Any]:
    return {"name": name, "messages": messages, "consumers": consumers}


def test_queue_without_consumer() -> None:
    r = rules()
    t = TOPOLOGY
    agent_q = t.agent_queue("refunds")
    out = r.on_queues(
        [row(t.router_queue), row(t.registry, consumers=1), row(agent_q), row("obs.retry.1000")],
        1_000,
    )
    assert [(a.kind, a.subject) for a in out] == [("no_consumer", t.router_queue)]
    # an idle agent queue is fine; one holding work nobody takes is not
    out = r.on_queues([row(t.router_queue), row(t.registry, consumers=1), row(agent_q, 4)], 2_000)
    assert [(a.kind, a.subject, a.state) for a in out] == [("no_consumer", agent_q, "raised")]
    assert r.on_queues([row(t.router_queue), row(t.registry, 0, 1), row(agent_q, 9)], 3_000) == []
    out = r.on_queues([row(t.router_queue, 0, 2), row(t.registry, 0, 1), row(agent_q, 9, 1)], 4_000)
    assert sorted((a.subject, a.state) for a in out) == [
        (agent_q, "cleared"),
        (t.router_queue, "cleared"),
    ]


def test_a_queue_that_vanished_clears_its_alert() -> None:
    r = rules()
    (raised,) = r.on_queues([row(TOPOLOGY.router_queue)], 1_000)
    (cleared,) = r.on_queues([], 2_000)
    assert (cleared.key, cleared.state) == (raised.key, "cleared")


def test_dead_letter_queue_growing() -> None:
    r = rules()
    dead = TOPOLOGY.dead_queue("retries")
    assert r.on_queues([row(dead, 10)], 0) == []
    assert r.on_queues([row(dead, 12)], 10_000) == []  # +2 < 3
    (raised,) = r.on_queues([row(dead, 13)], 20_000)
    assert (raised.kind, raised.state, raised.data["growth"]) == ("dead_letters", "raised", 3)
    assert "mesh dlq" in raised.message
    assert r.on_queues([row(dead, 14)], 30_000) == []  # still growing: still one alert
    # no growth over a whole window: cleared
    (cleared,) = r.on_queues([row(dead, 14)], 50_000)
    assert cleared.state == "cleared"
    assert r.on_queues([row(dead, 14)], 70_000) == []
