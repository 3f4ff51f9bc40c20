"""`Metrics`: the Prometheus metrics of one process, and the calls that record them.

One `Metrics` per process, with its own `CollectorRegistry` (never prometheus_client's
global one), so tests and several components in one process do not collide. Components
take ``metrics: Metrics | None``: None (``MESH_METRICS_PORT`` unset) records nothing and
costs one ``is None`` test per fact.

Two kinds of figure (their names are in `mesh.metrics.names`):

- Facts of the hot path (a dispatch, a retry, a handler's run) are recorded where they are
  already computed, by one call each. A call finds its pre-bound label child in a dict
  keyed by the label values (bound once per agent, strategy or status), then does one
  ``inc()`` or ``observe()``: no label lookup, no allocation beyond the key tuple.
- Figures a component keeps anyway (its counters, live agents, breakers, cache statistics,
  tasks in flight) are read when Prometheus scrapes, from the components given to `watch`
  (`mesh.metrics.collectors`): nothing per task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    Info,
    PlatformCollector,
    ProcessCollector,
)

from mesh.metrics.collectors import ComponentCollector, WatchKind
from mesh.metrics.names import (
    PREFIX,
    RECORDED,
    REROUTE_REASONS,
    ROUTING_BUCKETS,
    TASK_BUCKETS,
)
from mesh.schemas import now_ms

#: header a router stamps on a dispatch when its metrics are on (epoch ms of the publish):
#: a worker's queue-wait histogram is measured from it (without it, nothing is observed)
DISPATCHED_HEADER = "x-mesh-dispatched-ms"

Labels = tuple[str, ...]


def _bound(cache: dict[Labels, Any], metric: Any, key: Labels) -> Any:
    """`metric`'s child for the label values `key`, bound once and then cached."""
    found = cache.get(key)
    if found is None:
        found = cache[key] = metric.labels(*key)
    return found


def _counter(key: str, registry: CollectorRegistry) -> Counter:
    f = RECORDED[key]
    return Counter(f.name, f.help, f.labels, registry=registry)


def _histogram(key: str, registry: CollectorRegistry, buckets: tuple[float, ...]) -> Histogram:
    f = RECORDED[key]
    return Histogram(f.name, f.help, f.labels, buckets=buckets, registry=registry)


class Metrics:
    """The metrics of one process; `role` (router, registry, worker, observer...) and
    `namespace` are exposed as ``agent_reach_process_info``."""

    def __init__(self, *, role: str, namespace: str = "", process: bool = True) -> None:
        self.role = role
        self.registry = r = CollectorRegistry()
        if process:  # CPU, memory, open files; the Python version
            ProcessCollector(registry=r)
            PlatformCollector(registry=r)
        Info(f"{PREFIX}_process", "What this process runs", registry=r).info(
            {"role": role, "namespace": namespace}
        )
        self.tasks = _counter("tasks", r)
        self.dead_letters = _counter("dead_letters", r)
        self.dispatches = _counter("dispatches", r)
        self.routing = _histogram("routing", r, ROUTING_BUCKETS)
        self.reroutes = _counter("reroutes", r)
        self.queue_wait = _histogram("queue_wait", r, TASK_BUCKETS)
        self.handler = _histogram("handler", r, TASK_BUCKETS)
        self.end_to_end = _histogram("end_to_end", r, TASK_BUCKETS)
        self.retries = _counter("retries", r)
        # pre-bound children of each metric, by label values
        self._tasks: dict[Labels, Any] = {}
        self._dead: dict[Labels, Any] = {}
        self._dispatches: dict[Labels, Any] = {}
        self._routing: dict[Labels, Any] = {}
        self._reroutes: dict[Labels, Any] = {}
        self._queue_wait: dict[Labels, Any] = {}
        self._handler: dict[Labels, Any] = {}
        self._e2e: dict[Labels, Any] = {}
        self._retries: dict[Labels, Any] = {}
        #: the components read at scrape time, by kind
        self.watched: dict[WatchKind, list[Any]] = {"router": [], "registry": [], "worker": []}
        r.register(ComponentCollector(self.watched))

    # --- scrape-time sources ---------------------------------------------------------------
    def watch(self, kind: WatchKind, component: Any) -> None:
        """Read `component` (a started `RouterService`, `RegistryService` or
        `WorkerRuntime`) at each scrape, until `unwatch`."""
        self.watched[kind].append(component)

    def unwatch(self, kind: WatchKind, component: Any) -> None:
        """Stop reading `component` (it closed); one not watched is ignored."""
        watched = self.watched[kind]
        if component in watched:
            watched.remove(component)

    # --- router ----------------------------------------------------------------------------
    def dispatched(self, agent_id: str, strategy: str, seconds: float) -> None:
        """A confirmed dispatch, `seconds` after the router received the task."""
        _bound(self._dispatches, self.dispatches, (agent_id, strategy)).inc()
        _bound(self._routing, self.routing, (strategy,)).observe(seconds)

    def rerouted(self, agent_id: str, reason: str) -> None:
        """A dispatch to `agent_id` came back (`reason`: why RabbitMQ returned it) or found
        no queue bound (``unbound``)."""
        reason = reason if reason in REROUTE_REASONS else "other"
        _bound(self._reroutes, self.reroutes, (agent_id, reason)).inc()

    # --- tasks -----------------------------------------------------------------------------
    def ended(
        self, status: str, agent_id: str = "", strategy: str = "", created_ms: int | None = None
    ) -> None:
        """A task reached terminal `status`; with `created_ms`, its end-to-end time too."""
        _bound(self._tasks, self.tasks, (agent_id, strategy, status)).inc()
        if created_ms is not None:
            seconds = max(0.0, (now_ms() - created_ms) / 1000.0)
            _bound(self._e2e, self.end_to_end, (agent_id, status)).observe(seconds)

    def dead_lettered(self, reason: str) -> None:
        """A message went to ``<ns>.dead.<reason>``."""
        _bound(self._dead, self.dead_letters, (reason,)).inc()

    # --- worker ----------------------------------------------------------------------------
    def started(self, agent_id: str, headers: Mapping[str, Any] | None) -> None:
        """A task starts on an instance: its queue wait, when the router stamped it."""
        stamp = headers.get(DISPATCHED_HEADER) if headers else None
        if type(stamp) is not int:
            return
        seconds = max(0.0, (now_ms() - stamp) / 1000.0)
        _bound(self._queue_wait, self.queue_wait, (agent_id,)).observe(seconds)

    def handled(self, agent_id: str, outcome: str, seconds: float) -> None:
        """A handler ran for `seconds` and came to `outcome` (an `Outcome.kind`)."""
        _bound(self._handler, self.handler, (agent_id, outcome)).observe(seconds)

    def retried(self, agent_id: str) -> None:
        """A task of `agent_id` went to a retry delay queue."""
        _bound(self._retries, self.retries, (agent_id,)).inc()


def dispatch_headers() -> dict[str, int]:
    """The headers a router adds to a dispatch when its metrics are on."""
    return {DISPATCHED_HEADER: now_ms()}


__all__ = ["DISPATCHED_HEADER", "Metrics", "WatchKind", "dispatch_headers"]
