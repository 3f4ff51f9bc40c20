"""`ComponentCollector`: the scraped families of `mesh.metrics.names`, read from components.

What a router, a registry or a worker counts anyway is read when Prometheus scrapes,
never per task. A scrape runs in the HTTP server's thread while the event loop changes
the components, so every read takes a copy first (``list(...)`` of a list or dict is one
step under the GIL) and reads only plain numbers: it never awaits, locks or writes.

Components are duck-typed (`RouterService`, `RegistryService`, `WorkerRuntime`), so this
module imports none of them and none imports it back.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from mesh.metrics.names import BREAKER_STATES, SCRAPED
from mesh.schemas import now_ms

WatchKind = Literal["router", "registry", "worker"]
#: a family with samples added one by one
Sampled = CounterMetricFamily | GaugeMetricFamily

#: the families each kind of component yields
ROUTER_FAMILIES = (
    *("router_messages", "router_duplicates", "router_refused"),
    *("agents_live", "instances_live", "breaker_state"),
    *("cache_hits", "cache_misses", "cache_entries", "embed_batches", "embed_texts"),
    *("refits", "refit_cpu"),
)
#: registry families read from `RegistryService.stats`, by stats key
REGISTRY_STATS = {
    "registrations": "registered",
    "heartbeats": "heartbeats",
    "heartbeat_batches": "batches",
    "leases_lost": "lost",
    "instances_down": "down",
    "registry_refused": "refused",
}
REGISTRY_FAMILIES = (*REGISTRY_STATS, "leases_live")
WORKER_FAMILIES = ("in_flight", "slots", "deliveries")
#: read from the publisher of every kind of component
DROPPED_FAMILY = "dead_letters_dropped"


def family(key: str, value: float | None = None) -> Sampled:
    """An empty family `SCRAPED[key]`, or with the one sample `value` (no labels)."""
    f = SCRAPED[key]
    kind = CounterMetricFamily if f.kind == "counter" else GaugeMetricFamily
    if f.labels:
        return kind(f.name, f.help, labels=f.labels)
    return kind(f.name, f.help, value=value)


class ComponentCollector:
    """Yields the families of the components a `Metrics` watches, at each scrape."""

    def __init__(self, watched: Mapping[WatchKind, list[Any]]) -> None:
        self.watched = watched

    def describe(self) -> Iterator[Metric]:
        """The names this collector may yield (the registry refuses a clash)."""
        for key in (*ROUTER_FAMILIES, *REGISTRY_FAMILIES, *WORKER_FAMILIES, DROPPED_FAMILY):
            yield family(key)

    def collect(self) -> Iterator[Metric]:
        routers = list(self.watched["router"])
        if routers:
            yield from router_families(routers)
        registries = list(self.watched["registry"])
        if registries:
            yield from registry_families(registries)
        workers = list(self.watched["worker"])
        if workers:
            yield from worker_families(workers)
        every = [*routers, *registries, *workers]
        if every:
            yield dropped_family(every)


def router_families(routers: list[Any]) -> Iterator[Metric]:
    """Message counts of every router; the rest from their semantic selectors."""
    yield family("router_messages", sum(r.handled for r in routers))
    yield family("router_duplicates", sum(r.duplicates for r in routers))
    yield family("router_refused", sum(r.refused for r in routers))
    selectors = [r.selector for r in routers if hasattr(r.selector, "snapshot")]
    if not selectors:
        return  # targets only: no snapshot, no breakers, no embedder
    # the routers of one process see the same mesh: the first selector speaks for them
    first = selectors[0]
    yield from live_families(first.snapshot.all_agents())
    breakers = family("breaker_state")
    for agent_id, state in sorted(first.breakers.states().items()):
        for each in BREAKER_STATES:
            breakers.add_metric([agent_id, each], 1.0 if each == state else 0.0)
    yield breakers
    stats = [s.embedder.stats for s in selectors if hasattr(s.embedder, "stats")]
    if stats:
        yield family("cache_hits", sum(st.hits for st in stats))
        yield family("cache_misses", sum(st.misses for st in stats))
        yield family("cache_entries", sum(st.size for st in stats))
    yield family("embed_batches", sum(s.batcher.batches for s in selectors))
    yield family("embed_texts", sum(s.batcher.texts for s in selectors))
    yield family("refits", sum(s.keeper.fits for s in selectors))
    yield family("refit_cpu", sum(s.keeper.fit_cpu_s for s in selectors))
    yield family("refits_yielded", sum(s.keeper.fits_yielded for s in selectors))


def live_families(agents: Iterable[Any]) -> Iterator[Metric]:
    """Live agents, and live instances of every registered agent (0 when all are down)."""
    now = now_ms()
    per_agent = family("instances_live")
    alive = 0
    for agent in agents:
        if agent.registration is None:
            continue
        count = sum(1 for i in list(agent.instances.values()) if i.is_live(now))
        alive += count > 0
        per_agent.add_metric([agent.agent_id], count)
    yield family("agents_live", alive)
    yield per_agent


def registry_families(registries: list[Any]) -> Iterator[Metric]:
    for key, stat in REGISTRY_STATS.items():
        yield family(key, sum(r.stats[stat] for r in registries))
    counts = [r.leases_live for r in registries if r.leases_live is not None]
    if counts:  # one namespace, one Redis: any registry's last count will do
        yield family("leases_live", max(counts))


def dropped_family(components: list[Any]) -> Metric:
    """Dead letters the components' publishers dropped, by reason, summed."""
    totals: dict[str, int] = {}
    for component in components:
        publisher = getattr(component, "publisher", None)
        for reason, count in list(getattr(publisher, "dropped", {}).items()):
            totals[reason] = totals.get(reason, 0) + count
    dropped = family(DROPPED_FAMILY)
    for reason, count in sorted(totals.items()):
        dropped.add_metric([reason], count)
    return dropped


def worker_families(workers: list[Any]) -> Iterator[Metric]:
    """Per agent, summed over its instances in this process."""
    rows: dict[str, list[int]] = {}
    for w in workers:
        row = rows.setdefault(w.agent.agent_id, [0, 0, 0])
        row[0] += w.in_flight
        row[1] += w.agent.max_concurrency
        row[2] += w.deliveries
    in_flight, slots, deliveries = (family(k) for k in WORKER_FAMILIES)
    for agent_id, (flying, slot, delivered) in sorted(rows.items()):
        in_flight.add_metric([agent_id], flying)
        slots.add_metric([agent_id], slot)
        deliveries.add_metric([agent_id], delivered)
    yield from (in_flight, slots, deliveries)


__all__ = ["ComponentCollector", "Sampled", "WatchKind", "family"]
