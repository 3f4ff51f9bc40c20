"""Per-agent figures from the event stream: a plain class with `snapshot()`, no I/O.

For each agent: tasks by final status, success rate, latency percentiles (from the
``route.decision`` of a dispatch to the task's outcome event: queue wait plus handling;
the two come from different processes and are paired in whichever order they arrive),
routing time percentiles, reroutes away from it, bids won, times chosen by strategy, and
its circuit breaker as the routers see it: the same `BreakerBoard`, fed the same outcomes
(`mesh.router.outcomes`), so it opens and closes as theirs do (each router keeps its own
board; a half-open probe is a router's own business, so the mirror shows ``half_open``
until the next outcome).

Counters only grow; percentiles are over the last `LATENCY_SAMPLES` tasks of the agent.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mesh.clock import Clock
from mesh.dispatch.states import TERMINAL
from mesh.router.breaker import BreakerBoard
from mesh.router.outcomes import NOT_THE_AGENTS_FAULT, OUTCOME_KINDS
from mesh.schemas import Event

#: latencies kept per agent for the percentiles
LATENCY_SAMPLES = 1_000
#: dispatches waiting for their outcome (the oldest are forgotten first)
PENDING_LIMIT = 50_000
PERCENTILES = (50, 90, 99)
#: final statuses that count against an agent's success rate
FAILURES = frozenset({"failed", "expired", "dead", "rejected"})


def percentile(values: Sequence[float], q: float) -> float | None:
    """The `q`-th percentile of `values` by nearest rank (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return ordered[int(rank) - 1]


def summary(values: Sequence[float]) -> dict[str, float | int | None]:
    """``{"count", "p50", "p90", "p99"}`` of `values`, in their unit (ms)."""
    out: dict[str, float | int | None] = {"count": len(values)}
    for q in PERCENTILES:
        found = percentile(values, q)
        out[f"p{q}"] = round(found, 3) if found is not None else None
    return out


@dataclass(slots=True)
class AgentFigures:
    """What one agent did, as counted from events."""

    statuses: Counter[str] = field(default_factory=Counter)
    strategies: Counter[str] = field(default_factory=Counter)
    latencies_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    route_ms: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCY_SAMPLES))
    reroutes: int = 0
    bids_won: int = 0
    retries: int = 0

    @property
    def success_rate(self) -> float | None:
        done = self.statuses["completed"]
        failed = sum(self.statuses[s] for s in FAILURES)
        return done / (done + failed) if done + failed else None


def _remember(
    table: OrderedDict[str, tuple[str, int]], task_id: str, seen: tuple[str, int]
) -> None:
    """Keep `seen` for `task_id`, forgetting the oldest beyond `PENDING_LIMIT`."""
    table[task_id] = seen
    table.move_to_end(task_id)
    while len(table) > PENDING_LIMIT:
        table.popitem(last=False)


class Figures:
    """Figures of every agent seen in the events (`observe` each event, read `snapshot`)."""

    def __init__(self, settings: Any, clock: Clock | None = None) -> None:
        self.breakers = BreakerBoard(
            window_s=settings.breaker_window_s,
            failure_ratio=settings.breaker_failure_ratio,
            min_calls=settings.breaker_min_calls,
            open_s=settings.breaker_open_s,
            clock=clock,
        )
        self.agents: dict[str, AgentFigures] = {}
        self.events = 0
        self.decisions = 0
        self.no_match = 0
        self.unroutable = 0
        self._pending: OrderedDict[str, tuple[str, int]] = OrderedDict()
        #: outcomes whose decision has not come yet: the router and the worker publish
        #: from different connections, so the two may arrive in either order
        self._early: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def agent(self, agent_id: str) -> AgentFigures:
        found = self.agents.get(agent_id)
        if found is None:
            found = self.agents[agent_id] = AgentFigures()
        return found

    def observe(self, event: Event) -> None:
        self.events += 1
        kind = event.type
        if kind == "route.decision":
            self._decision(event)
        elif kind == "task.rerouting":
            away = event.data.get("from_agent") or event.agent_id
            if away:
                self.agent(str(away)).reroutes += 1
        elif kind == "task.retrying" and event.agent_id:
            self.agent(event.agent_id).retries += 1
        elif kind.startswith("task.") and kind[len("task.") :] in TERMINAL:
            self._outcome(event, kind[len("task.") :])

    def _decision(self, event: Event) -> None:
        self.decisions += 1
        route = event.data.get("route")
        if not isinstance(route, dict) or event.agent_id is None:
            self.no_match += 1
            return
        figures = self.agent(event.agent_id)
        strategy = str(route.get("strategy"))
        figures.strategies[strategy] += 1
        if strategy == "fallback":
            self.no_match += 1
        if strategy == "bid":
            figures.bids_won += 1
        route_ms = (event.data.get("timings") or {}).get("route_ms")
        if isinstance(route_ms, int | float):
            figures.route_ms.append(float(route_ms))
        if not event.task_id:
            return
        early = self._early.pop(event.task_id, None)
        if early is not None:
            if early[0] == event.agent_id:
                figures.latencies_ms.append(float(max(0, early[1] - event.ts_ms)))
            return
        _remember(self._pending, event.task_id, (event.agent_id, event.ts_ms))

    def _outcome(self, event: Event, status: str) -> None:
        if event.agent_id is None:
            if status == "unroutable":
                self.unroutable += 1
            if event.task_id:
                self._pending.pop(event.task_id, None)
            return
        figures = self.agent(event.agent_id)
        figures.statuses[status] += 1
        pending = self._pending.pop(event.task_id, None) if event.task_id else None
        if pending is not None and pending[0] == event.agent_id:
            figures.latencies_ms.append(float(max(0, event.ts_ms - pending[1])))
        elif pending is None and event.task_id:
            _remember(self._early, event.task_id, (event.agent_id, event.ts_ms))
        # the breaker counts outcomes exactly as `OutcomeLedger.observe` does
        outcome = OUTCOME_KINDS.get(event.type)
        if outcome == "completed":
            self.breakers.record(event.agent_id, True)
        elif outcome == "failed" and event.data.get("error") not in NOT_THE_AGENTS_FAULT:
            self.breakers.record(event.agent_id, False)

    def snapshot(self) -> dict[str, Any]:
        """Every figure as plain data (JSON-ready), agents sorted by id."""
        agents = {}
        for agent_id in sorted(self.agents):
            f = self.agents[agent_id]
            rate = f.success_rate
            agents[agent_id] = {
                "tasks": dict(sorted(f.statuses.items())),
                "success_rate": round(rate, 4) if rate is not None else None,
                "latency_ms": summary(list(f.latencies_ms)),
                "route_ms": summary(list(f.route_ms)),
                "chosen": dict(sorted(f.strategies.items())),
                "reroutes": f.reroutes,
                "retries": f.retries,
                "bids_won": f.bids_won,
                "breaker": self.breakers.state(agent_id),
            }
        return {
            "events": self.events,
            "decisions": self.decisions,
            "no_match": self.no_match,
            "unroutable": self.unroutable,
            "agents": agents,
        }


__all__ = ["AgentFigures", "Figures", "percentile", "summary"]
