"""The hops of one trace as a tree, from its events and its tasks' records. Pure.

One hop per task: the agent and instance that took it, how it was routed (strategy and
score, from its ``route.decision``), its states with times (the task history in Redis has
every transition; without it, the events), timings (routing, queue wait, handler, total),
its status, the agents it was rerouted away from, and for a handoff its deadline budget
next to what its parent had left (a handoff gets at most half of it).

A child names its parent when the decision carries ``parent_task_id``; otherwise the
parent is inferred: the task of the trace whose run encloses the child's start, the
innermost one (a handoff is made, and waited for, while its parent runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from mesh.dispatch.states import TERMINAL
from mesh.observer.store import TaskRecord
from mesh.schemas import Event


@dataclass(frozen=True, slots=True)
class Step:
    """One state of a task: when it was entered, by whom, and why."""

    state: str
    ts_ms: int
    by: str = ""
    note: str = ""


@dataclass(slots=True)
class Hop:
    task_id: str
    agent_id: str | None = None
    instance_id: str | None = None
    strategy: str | None = None
    score: float | None = None
    low_confidence: bool = False
    status: str | None = None
    error: str | None = None
    capability: str | None = None
    parent_task_id: str | None = None
    hops: int | None = None
    deadline_ms: int | None = None
    steps: list[Step] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    rerouted_from: list[str] = field(default_factory=list)
    children: list[Hop] = field(default_factory=list)

    @property
    def start_ms(self) -> int | None:
        return self.steps[0].ts_ms if self.steps else None

    @property
    def end_ms(self) -> int | None:
        ends = [s.ts_ms for s in self.steps if s.state in TERMINAL]
        return ends[-1] if ends else None

    @property
    def budget_ms(self) -> int | None:
        """Time from the task's start to its deadline."""
        if self.deadline_ms is None or self.start_ms is None:
            return None
        return self.deadline_ms - self.start_ms

    def as_dict(self, parent: Hop | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {
            "task_id": self.task_id,
            "parent_task_id": self.parent_task_id,
            "agent_id": self.agent_id,
            "instance_id": self.instance_id,
            "strategy": self.strategy,
            "score": self.score,
            "low_confidence": self.low_confidence,
            "status": self.status,
            "error": self.error,
            "capability": self.capability,
            "hops": self.hops,
            "deadline_ms": self.deadline_ms,
            "budget_ms": self.budget_ms,
            "parent_left_ms": parent_left_ms(parent, self),
            "states": [
                {"state": s.state, "ts_ms": s.ts_ms, "by": s.by, "note": s.note} for s in self.steps
            ],
            "timings": self.timings,
            "rerouted_from": self.rerouted_from,
            "handoffs": [c.as_dict(self) for c in self.children],
        }
        return out


@dataclass(slots=True)
class Trace:
    trace_id: str
    roots: list[Hop]
    #: where the hops came from: ``observer`` (stored events) or ``task records``
    source: str
    events: int = 0
    #: False when the task-record fallback did not read the whole namespace
    complete: bool = True

    def hops(self) -> list[Hop]:
        """Every hop, depth first in the order they started."""
        out: list[Hop] = []

        def walk(hop: Hop) -> None:
            out.append(hop)
            for child in hop.children:
                walk(child)

        for root in self.roots:
            walk(root)
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "trace_id": self.trace_id,
            "source": self.source,
            "complete": self.complete,
            "events": self.events,
            "tasks": len(self.hops()),
            "hops": [r.as_dict() for r in self.roots],
        }


def parent_left_ms(parent: Hop | None, child: Hop) -> int | None:
    """What the parent had left to its deadline when the child started."""
    if parent is None or parent.deadline_ms is None or child.start_ms is None:
        return None
    return parent.deadline_ms - child.start_ms


def build_trace(
    trace_id: str,
    events: Iterable[Event],
    records: Mapping[str, TaskRecord],
    *,
    source: str = "observer",
    complete: bool = True,
) -> Trace:
    """The tree of a trace's hops (`records`: the Redis records of its tasks, by id)."""
    hops: dict[str, Hop] = {}
    seen = 0
    event_steps: dict[str, list[Step]] = {}
    for event in sorted(events, key=lambda e: e.ts_ms):
        seen += 1
        if not event.task_id:
            continue
        hop = hops.setdefault(event.task_id, Hop(event.task_id))
        _apply_event(hop, event, event_steps.setdefault(event.task_id, []))
    for task_id in records:
        hops.setdefault(task_id, Hop(task_id))
    for task_id, hop in hops.items():
        record = records.get(task_id)
        if record is not None and record.history:
            hop.steps = [
                Step(
                    str(h.get("state")), int(h.get("ts_ms", 0)), h.get("by", ""), h.get("note", "")
                )
                for h in record.history
            ]
        else:
            hop.steps = event_steps.get(task_id, [])
        if record is not None:
            _apply_record(hop, record)
        _derive_timings(hop)
    _link(hops)
    roots = [h for h in hops.values() if h.parent_task_id not in hops]
    for hop in hops.values():
        hop.children.sort(key=_order)
    roots.sort(key=_order)
    return Trace(trace_id, roots, source, seen, complete)


def _order(hop: Hop) -> tuple[int, str]:
    return (hop.start_ms if hop.start_ms is not None else 2**62, hop.task_id)


def _apply_event(hop: Hop, event: Event, steps: list[Step]) -> None:
    data = event.data
    if event.type == "route.decision":
        route = data.get("route")
        if isinstance(route, dict):
            hop.agent_id = event.agent_id or hop.agent_id
            hop.strategy = route.get("strategy")
            hop.score = route.get("score")
            hop.low_confidence = bool(route.get("low_confidence"))
            steps.append(Step("dispatched", event.ts_ms, "router"))
        route_ms = (data.get("timings") or {}).get("route_ms")
        if isinstance(route_ms, int | float):
            hop.timings["route_ms"] = float(route_ms)
        hop.capability = data.get("capability") or hop.capability
        # fields a decision may carry (a router that sends them names the parent)
        if data.get("parent_task_id"):
            hop.parent_task_id = str(data["parent_task_id"])
        if isinstance(data.get("hops"), int):
            hop.hops = data["hops"]
        if isinstance(data.get("deadline_ms"), int):
            hop.deadline_ms = data["deadline_ms"]
        return
    if event.type.startswith("task."):
        state = event.type[len("task.") :]
        note = str(data.get("from_agent") or data.get("error") or data.get("code") or "")
        steps.append(Step(state, event.ts_ms, event.instance_id or "", note))
        if state == "rerouting" and data.get("from_agent"):
            hop.rerouted_from.append(str(data["from_agent"]))
        if state in TERMINAL:
            hop.status = state
            hop.error = data.get("error") or data.get("code") or hop.error
        if event.agent_id and state not in ("rerouting", "unroutable"):
            hop.agent_id = event.agent_id
        hop.instance_id = event.instance_id or hop.instance_id


def _apply_record(hop: Hop, record: TaskRecord) -> None:
    state = record.state
    hop.agent_id = hop.agent_id or state.get("agent_id") or None
    if state.get("state") in TERMINAL:
        hop.status = state["state"]
    result = record.result
    if result is not None:
        hop.status = result.get("status") or hop.status
        hop.instance_id = result.get("instance_id") or hop.instance_id
        hop.agent_id = result.get("agent_id") or hop.agent_id
        if isinstance(result.get("hops"), int) and hop.hops is None:
            hop.hops = result["hops"]
        error = result.get("error") or {}
        hop.error = error.get("code") or hop.error
        route = result.get("route") or {}
        if route and hop.strategy is None:
            hop.strategy = route.get("strategy")
            hop.score = route.get("score")
            hop.low_confidence = bool(route.get("low_confidence"))
        for name, value in (result.get("timings") or {}).items():
            if isinstance(value, int | float):
                hop.timings[name] = float(value)
    for step in hop.steps:
        if step.state == "rerouting" and step.note and step.note not in hop.rerouted_from:
            hop.rerouted_from.append(step.note)


def _derive_timings(hop: Hop) -> None:
    """Queue wait (dispatched -> accepted, last dispatch) and the total, from the steps."""
    dispatched = [s.ts_ms for s in hop.steps if s.state == "dispatched"]
    accepted = [s.ts_ms for s in hop.steps if s.state == "accepted"]
    if dispatched and accepted and accepted[-1] >= dispatched[-1]:
        hop.timings.setdefault("queue_ms", float(accepted[-1] - dispatched[-1]))
    if hop.start_ms is not None and hop.end_ms is not None:
        hop.timings["total_ms"] = float(hop.end_ms - hop.start_ms)


def _link(hops: Mapping[str, Hop]) -> None:
    """Attach each hop to its parent (named, or the innermost run enclosing its start)."""
    for hop in hops.values():
        if hop.parent_task_id is None:
            hop.parent_task_id = _enclosing(hop, hops)
    for hop in hops.values():
        parent = hops.get(hop.parent_task_id or "")
        if parent is not None and parent is not hop:
            parent.children.append(hop)


def _enclosing(child: Hop, hops: Mapping[str, Hop]) -> str | None:
    start = child.start_ms
    if start is None:
        return None
    best: Hop | None = None
    for other in hops.values():
        begin, end = other.start_ms, other.end_ms
        if other is child or begin is None or begin >= start:
            continue
        if end is not None and end < start:
            continue
        if child.end_ms is not None and end is not None and end < child.end_ms:
            continue  # a parent waits for its handoff: it cannot end first
        if best is None or begin > (best.start_ms or 0):
            best = other
    return best.task_id if best is not None else None


__all__ = ["Hop", "Step", "Trace", "build_trace", "parent_left_ms"]
