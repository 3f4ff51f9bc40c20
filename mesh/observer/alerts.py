"""The observer's alert rules, pure: events and queue rows in, alert transitions out.

Each condition has a key (``<kind>:<subject>``) and is either active or not: `AlertBook`
returns an `Alert` only when a condition turns on (``raised``) or off (``cleared``), never
again while it holds, so a burst of events raises one alert, not one per event.

=================  ======================================================================
kind               raised when / cleared when
=================  ======================================================================
``loop``           a trace visits one agent more than `LOOP_VISITS` times (distinct tasks
                   dispatched to it), or a worker says so (its own ``alert.loop``, relayed:
                   logged, not published again). One-shot: a loop is a fact about a trace.
``no_match``       over the window, with at least `min_samples` semantic decisions, more
                   than `no_match_ratio` of them found no agent (or only the fallback) /
                   the share is back at or below it, or the window emptied
``arbitration``    the same for decisions settled by arbitration (a near tie)
``flapping``       an agent came back up `flap_count` times within `flap_window_s` after
                   going down (a lapsed lease or a crash; a deregistration is a clean stop
                   and does not count) / fewer bounces in the window
``dead_letters``   a dead-letter queue grew by `dead_letter_growth` messages within
                   `dead_letter_window_s` / it did not grow in that window
``no_consumer``    a router or registry queue has no consumer, or an agent queue holds
                   messages that no consumer takes / a consumer is back (or the queue is
                   empty, or gone)
=================  ======================================================================

Decisions with strategy ``target`` are not semantic routing and count in neither rate.
Alerts published by observers (``data.source == "observer"``) are ignored on the way in:
each observer judges for itself.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from mesh.config import default_of
from mesh.observer.windows import CountWindow, GrowthWindow, RatioWindow
from mesh.schemas import Event
from mesh.topology import DEAD_REASONS, Topology
from mesh.worker.middleware import LOOP_VISITS

AlertState = Literal["raised", "cleared"]
#: every alert the observer raises, as ``alert.<kind>`` events (README "Alerts")
ALERT_KINDS: tuple[str, ...] = (
    "loop",
    "no_match",
    "arbitration",
    "flapping",
    "dead_letters",
    "no_consumer",
)
#: who found the condition: this observer, or a worker whose alert it relays
Source = Literal["observer", "worker"]
#: the strategies a no-match is made of: nothing chosen (None) or the fallback agent
NO_MATCH_STRATEGIES = frozenset({None, "fallback"})
#: traces whose agent visits are remembered for loop detection (oldest forgotten first)
TRACES_REMEMBERED = 10_000
#: one-shot alert keys remembered (so a loop is raised once per trace and agent)
ONE_SHOT_REMEMBERED = 50_000
#: alert transitions kept for display (`mesh stats`)
RECENT_ALERTS = 100


#: `Thresholds` fields that are the settings ``observer_<field>`` (defaults read there)
SETTINGS_FIELDS: tuple[str, ...] = (
    "window_s",
    "min_samples",
    "no_match_ratio",
    "arbitration_ratio",
    "flap_count",
    "flap_window_s",
    "dead_letter_growth",
    "dead_letter_window_s",
)
SETTINGS_PREFIX = "observer_"


def _setting(name: str) -> Any:
    """The default of `Settings.observer_<name>` (`mesh.config.default_of`)."""
    return default_of(SETTINGS_PREFIX + name)


@dataclass(frozen=True, slots=True)
class Thresholds:
    """The numbers of the rules (`from_settings`: the ``MESH_OBSERVER_*`` settings, whose
    defaults are these defaults)."""

    window_s: float = _setting("window_s")
    min_samples: int = _setting("min_samples")
    no_match_ratio: float = _setting("no_match_ratio")
    arbitration_ratio: float = _setting("arbitration_ratio")
    flap_count: int = _setting("flap_count")
    flap_window_s: float = _setting("flap_window_s")
    dead_letter_growth: int = _setting("dead_letter_growth")
    dead_letter_window_s: float = _setting("dead_letter_window_s")
    loop_visits: int = LOOP_VISITS

    @classmethod
    def from_settings(cls, settings: Any) -> Thresholds:
        return cls(**{f: getattr(settings, SETTINGS_PREFIX + f) for f in SETTINGS_FIELDS})


@dataclass(frozen=True, slots=True)
class Alert:
    """One transition of one condition."""

    kind: str
    subject: str
    state: AlertState
    message: str
    ts_ms: int
    source: Source = "observer"
    data: Mapping[str, Any] = field(default_factory=dict)
    trace_id: str | None = None
    task_id: str | None = None
    agent_id: str | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.subject}"

    @property
    def published(self) -> bool:
        """Whether the observer publishes it (a worker's alert is on the exchange already)."""
        return self.source == "observer"

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts_ms": self.ts_ms,
            "alert": self.kind,
            "state": self.state,
            "subject": self.subject,
            "message": self.message,
            "source": self.source,
            "trace_id": self.trace_id,
            "task_id": self.task_id,
            "agent_id": self.agent_id,
            "data": dict(self.data),
        }

    def event(self, observer_id: str) -> Event:
        """The ``alert.<kind>`` event of this transition (``data.state`` says which)."""
        return Event(
            type=f"alert.{self.kind}",
            ts_ms=self.ts_ms,
            trace_id=self.trace_id,
            task_id=self.task_id,
            agent_id=self.agent_id,
            data={
                **self.data,
                "state": self.state,
                "subject": self.subject,
                "message": self.message,
                "source": "observer",
                "observer_id": observer_id,
            },
        )


class AlertBook:
    """Which conditions hold now; turns "holds / does not hold" into transitions."""

    def __init__(self) -> None:
        self.active: dict[str, Alert] = {}
        self.recent: deque[Alert] = deque(maxlen=RECENT_ALERTS)
        self.raised = 0
        self._once: OrderedDict[str, None] = OrderedDict()

    def update(self, holds: bool, alert: Alert) -> Alert | None:
        """`alert` (state ``raised``) when its condition starts to hold, a ``cleared`` copy
        when it stops; None when nothing changed."""
        key = alert.key
        if holds and key not in self.active:
            self.active[key] = alert
            return self._note(alert)
        if not holds and key in self.active:
            raised = self.active.pop(key)
            return self._note(
                Alert(
                    raised.kind,
                    raised.subject,
                    "cleared",
                    f"cleared: {alert.message}",
                    alert.ts_ms,
                    raised.source,
                    alert.data,
                    raised.trace_id,
                    raised.task_id,
                    raised.agent_id,
                )
            )
        return None

    def once(self, alert: Alert) -> Alert | None:
        """A one-shot alert: returned the first time its key is seen, then None."""
        if alert.key in self._once:
            return None
        self._once[alert.key] = None
        while len(self._once) > ONE_SHOT_REMEMBERED:
            self._once.popitem(last=False)
        return self._note(alert)

    def _note(self, alert: Alert) -> Alert:
        self.recent.append(alert)
        self.raised += alert.state == "raised"
        return alert


@dataclass(frozen=True, slots=True)
class QueueWatch:
    """Which queues the queue rules look at, by name (from the topology)."""

    #: queues that must always have a consumer (router, registry...)
    consumed: frozenset[str]
    #: prefix of agent queues: a consumer is needed while messages wait
    agent_prefix: str
    dead: frozenset[str]

    @classmethod
    def from_topology(cls, topology: Topology, *, access_control: bool = False) -> QueueWatch:
        consumed = {topology.router_queue, topology.registry}
        if access_control:
            # results and feedback reach the callers only through a router's consumer
            consumed |= {topology.results, topology.feedback}
        return cls(
            frozenset(consumed),
            topology.agent_queue(""),
            frozenset(topology.dead_queue(r) for r in DEAD_REASONS),
        )


class AlertRules:
    """Every rule of the module docstring, over one stream of events and queue samples."""

    def __init__(self, thresholds: Thresholds, watch: QueueWatch) -> None:
        self.t = thresholds
        self.watch = watch
        self.book = AlertBook()
        self.no_match = RatioWindow(thresholds.window_s)
        self.arbitration = RatioWindow(thresholds.window_s)
        self._visits: OrderedDict[str, dict[str, set[str]]] = OrderedDict()
        self._last_down: dict[str, int] = {}
        self._bounces: dict[str, CountWindow] = {}
        self._dead: dict[str, GrowthWindow] = {}
        self._queues_seen: set[str] = set()

    # --- events ----------------------------------------------------------------------------
    def on_event(self, event: Event) -> list[Alert]:
        """The transitions one event causes (most events cause none)."""
        if event.type == "route.decision":
            return self._decision(event)
        if event.type == "alert.loop":
            return self._worker_loop(event)
        if event.type in ("agent.up", "agent.down"):
            return self._membership(event)
        return []

    def _decision(self, event: Event) -> list[Alert]:
        out: list[Alert] = []
        route = event.data.get("route")
        strategy = route.get("strategy") if isinstance(route, dict) else None
        if strategy != "target":
            self.no_match.add(event.ts_ms, strategy in NO_MATCH_STRATEGIES)
            if strategy not in NO_MATCH_STRATEGIES:
                self.arbitration.add(event.ts_ms, strategy == "arbitration")
            out += self._rates(event.ts_ms)
        if event.agent_id and event.trace_id and event.task_id:
            loop = self._count_visit(event.trace_id, event.agent_id, event.task_id, event)
            if loop is not None:
                out.append(loop)
        return out

    def _count_visit(
        self, trace_id: str, agent_id: str, task_id: str, event: Event
    ) -> Alert | None:
        agents = self._visits.get(trace_id)
        if agents is None:
            agents = self._visits[trace_id] = {}
            while len(self._visits) > TRACES_REMEMBERED:
                self._visits.popitem(last=False)
        tasks = agents.setdefault(agent_id, set())
        tasks.add(task_id)
        visits = len(tasks)
        if visits <= self.t.loop_visits:
            return None
        return self.book.once(
            Alert(
                "loop",
                f"{trace_id}/{agent_id}",
                "raised",
                f"trace {trace_id} visited agent {agent_id} {visits} times",
                event.ts_ms,
                data={"visits": visits},
                trace_id=trace_id,
                task_id=task_id,
                agent_id=agent_id,
            )
        )

    def _worker_loop(self, event: Event) -> list[Alert]:
        if event.data.get("source") == "observer" or not event.trace_id or not event.agent_id:
            return []
        visits = event.data.get("visits")
        found = self.book.once(
            Alert(
                "loop",
                f"{event.trace_id}/{event.agent_id}",
                "raised",
                f"trace {event.trace_id} visited agent {event.agent_id} {visits} times "
                f"(reported by instance {event.instance_id})",
                event.ts_ms,
                source="worker",
                data=dict(event.data),
                trace_id=event.trace_id,
                task_id=event.task_id,
                agent_id=event.agent_id,
            )
        )
        return [found] if found is not None else []

    def _membership(self, event: Event) -> list[Alert]:
        agent = event.agent_id
        if not agent:
            return []
        if event.type == "agent.down":
            if event.data.get("reason") != "deregistered":
                self._last_down[agent] = event.ts_ms
            return []
        down = self._last_down.pop(agent, None)
        window = self._bounces.setdefault(agent, CountWindow(self.t.flap_window_s))
        if down is not None and event.ts_ms - down <= window.window_ms:
            window.add(event.ts_ms)
        found = self._flapping(agent, window, event.ts_ms)
        return [found] if found is not None else []

    def _flapping(self, agent: str, window: CountWindow, now_ms: int) -> Alert | None:
        window.expire(now_ms)
        n = window.count
        return self.book.update(
            n >= self.t.flap_count,
            Alert(
                "flapping",
                agent,
                "raised",
                f"agent {agent} came back up {n} times within {self.t.flap_window_s:g} s "
                "after going down",
                now_ms,
                data={"bounces": n, "window_s": self.t.flap_window_s},
                agent_id=agent,
            ),
        )

    def _rates(self, now_ms: int) -> list[Alert]:
        out = []
        for kind, window, limit, what in (
            ("no_match", self.no_match, self.t.no_match_ratio, "found no agent"),
            ("arbitration", self.arbitration, self.t.arbitration_ratio, "needed arbitration"),
        ):
            window.expire(now_ms)
            if 0 < window.count < self.t.min_samples:
                continue  # too few samples to judge either way: nothing changes
            ratio = window.ratio()
            holds = ratio is not None and ratio > limit
            share = f"{ratio:.0%}" if ratio is not None else "none"
            found = self.book.update(
                holds,
                Alert(
                    kind,
                    "mesh",
                    "raised",
                    f"{share} of {window.count} decisions in the last {self.t.window_s:g} s "
                    f"{what} (threshold {limit:.0%})",
                    now_ms,
                    data={
                        "ratio": round(ratio, 4) if ratio is not None else None,
                        "decisions": window.count,
                        "hits": window.hits,
                        "threshold": limit,
                        "window_s": self.t.window_s,
                    },
                ),
            )
            if found is not None:
                out.append(found)
        return out

    # --- time ------------------------------------------------------------------------------
    def tick(self, now_ms: int) -> list[Alert]:
        """Conditions that end by time alone (windows emptying)."""
        out = self._rates(now_ms)
        for agent, window in list(self._bounces.items()):
            found = self._flapping(agent, window, now_ms)
            if found is not None:
                out.append(found)
            if not window.count and f"flapping:{agent}" not in self.book.active:
                del self._bounces[agent]
        return out

    # --- queues ----------------------------------------------------------------------------
    def on_queues(self, rows: Iterable[Mapping[str, Any]], now_ms: int) -> list[Alert]:
        """Rows of the management API's queue list (name, messages, consumers)."""
        out: list[Alert] = []
        seen: set[str] = set()
        for row in rows:
            name = str(row.get("name", ""))
            seen.add(name)
            messages = int(row.get("messages", 0) or 0)
            consumers = int(row.get("consumers", 0) or 0)
            if name in self.watch.dead:
                out += self._dead_letters(name, messages, now_ms)
            elif name in self.watch.consumed or name.startswith(self.watch.agent_prefix):
                needed = name in self.watch.consumed or messages > 0
                found = self._no_consumer(name, needed and consumers == 0, messages, now_ms)
                if found is not None:
                    out.append(found)
        for gone in self._queues_seen - seen:
            found = self._no_consumer(gone, False, 0, now_ms)
            if found is not None:
                out.append(found)
            self._dead.pop(gone, None)
        self._queues_seen = seen
        return out

    def _dead_letters(self, name: str, messages: int, now_ms: int) -> list[Alert]:
        window = self._dead.setdefault(name, GrowthWindow(self.t.dead_letter_window_s))
        window.add(now_ms, messages)
        growth = window.growth()
        key = f"dead_letters:{name}"
        holds = growth >= self.t.dead_letter_growth or (key in self.book.active and growth > 0)
        found = self.book.update(
            holds,
            Alert(
                "dead_letters",
                name,
                "raised",
                f"dead-letter queue {name} grew by {growth} to {messages} messages within "
                f"{self.t.dead_letter_window_s:g} s (see `mesh dlq`)",
                now_ms,
                data={"queue": name, "growth": growth, "messages": messages},
            ),
        )
        return [found] if found is not None else []

    def _no_consumer(self, name: str, holds: bool, messages: int, now_ms: int) -> Alert | None:
        return self.book.update(
            holds,
            Alert(
                "no_consumer",
                name,
                "raised",
                f"queue {name} has no consumer ({messages} messages waiting)",
                now_ms,
                data={"queue": name, "messages": messages},
            ),
        )


__all__ = ["Alert", "AlertBook", "AlertRules", "QueueWatch", "Thresholds"]
