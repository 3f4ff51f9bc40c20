"""Every metric of the mesh, named here and nowhere else (habit 2, for Prometheus).

Names follow the Prometheus conventions: ``agent_reach_`` first, ``_seconds`` for times,
and counters are exposed with ``_total`` (prometheus_client adds it to the names below).
Labels are bounded: agent ids (bounded by registration), strategies, statuses, reasons,
queue names of the namespace; never a task id or a trace id.

`Metrics` (`mesh.metrics.core`) records the facts of the hot path into the `RECORDED`
ones; the `SCRAPED` ones are read from the components when Prometheus scrapes
(`mesh.metrics.collectors`, `mesh.metrics.queues`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, NamedTuple

#: prefix of every metric name
PREFIX = "agent_reach"
#: routing takes milliseconds: fine buckets from 0.5 ms to 5 s
ROUTING_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
#: queue waits, handlers and whole tasks: 1 ms up to the 10-minute maximum task lifetime
TASK_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5),
    *(1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0),
)
#: why RabbitMQ returned a dispatch (`mesh.router.reasons.death_reason`) and ``unbound``
#: (no queue bound for the agent); any other reason is counted as ``other``
REROUTE_REASONS = frozenset({"expired", "rejected", "delivery_limit", "maxlen", "unbound"})
#: the states of a circuit breaker (`mesh.router.breaker.State`)
BREAKER_STATES = ("closed", "open", "half_open")

Kind = Literal["counter", "gauge", "histogram"]


class Family(NamedTuple):
    """One metric: name (counters without ``_total``), kind, help and label names."""

    name: str
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()


def _f(name: str, kind: Kind, text: str, *labels: str) -> Family:
    return Family(f"{PREFIX}_{name}", kind, text, labels)


#: recorded by `Metrics` where the fact is computed (router, worker)
RECORDED: Mapping[str, Family] = {
    "tasks": _f(
        "tasks",
        "counter",
        "Tasks that reached a terminal status (agent and strategy are empty when a router "
        "ended the task itself: unroutable, dead, expired before any dispatch)",
        *("agent", "strategy", "status"),
    ),
    "dead_letters": _f("dead_letters", "counter", "Messages put into <ns>.dead.<reason>", "reason"),
    "dispatches": _f(
        "dispatches", "counter", "Dispatches published and confirmed", "agent", "strategy"
    ),
    "routing": _f(
        "routing_seconds",
        "histogram",
        "From a router receiving a task to its dispatch being confirmed",
        "strategy",
    ),
    "reroutes": _f(
        "reroutes",
        "counter",
        "Dispatches to an agent that came back (or found no queue) and were routed again",
        *("agent", "reason"),
    ),
    "queue_wait": _f(
        "queue_wait_seconds",
        "histogram",
        "From a router publishing a dispatch to the task starting on an instance",
        "agent",
    ),
    "handler": _f(
        "handler_seconds",
        "histogram",
        "Handler run time, by outcome (completed, failed, retry, reject, expired)",
        *("agent", "outcome"),
    ),
    "end_to_end": _f(
        "end_to_end_seconds",
        "histogram",
        "From ingress (the task's created_ms) to its terminal Result, on the worker",
        *("agent", "status"),
    ),
    "retries": _f("retries", "counter", "Tasks sent to a retry delay queue", "agent"),
}

#: read from the components at scrape time (nothing per task)
SCRAPED: Mapping[str, Family] = {
    # router
    "router_messages": _f("router_messages", "counter", "Messages a router finished handling"),
    "router_duplicates": _f(
        "router_duplicates", "counter", "Ingress messages whose task_id was known already"
    ),
    "router_refused": _f("router_refused", "counter", "Messages refused by access control"),
    "agents_live": _f("agents_live", "gauge", "Agents with a live lease, as a router sees them"),
    "instances_live": _f(
        "instances_live", "gauge", "Instances with a live lease, as a router sees them", "agent"
    ),
    "breaker_state": _f(
        "breaker_state",
        "gauge",
        "Circuit breakers of the agents a router counted outcomes for: 1 for the state it is in",
        *("agent", "state"),
    ),
    "cache_hits": _f("embedding_cache_hits", "counter", "Query embeddings served from the LRU"),
    "cache_misses": _f("embedding_cache_misses", "counter", "Query embeddings the model computed"),
    "cache_entries": _f("embedding_cache_entries", "gauge", "Vectors held by the LRU cache"),
    "embed_batches": _f("embedding_batches", "counter", "Micro-batches of query embeddings"),
    "embed_texts": _f("embedding_texts", "counter", "Query texts embedded in micro-batches"),
    "refits": _f("index_refits", "counter", "Head refits of the capability index"),
    "refit_cpu": _f("index_refit_cpu_seconds", "counter", "CPU seconds spent in head refits"),
    "refits_yielded": _f(
        "index_refits_yielded", "counter", "Full head refits given up because the load came back"
    ),
    # registry (`RegistryService.stats`)
    "registrations": _f("registry_registrations", "counter", "Registrations granted a lease"),
    "heartbeats": _f("registry_heartbeats", "counter", "Heartbeats applied"),
    "heartbeat_batches": _f("registry_heartbeat_batches", "counter", "Heartbeat batches applied"),
    "leases_lost": _f("registry_leases_lost", "counter", "Heartbeats answered lease.lost"),
    "instances_down": _f(
        "registry_instances_down", "counter", "Instances reported down (goodbye or lapsed lease)"
    ),
    "registry_refused": _f("registry_refused", "counter", "Registry messages refused"),
    "leases_live": _f("registry_leases_live", "gauge", "Live leases in Redis, whole namespace"),
    # any component (`Publisher.dropped`)
    "dead_letters_dropped": _f(
        "dead_letters_dropped",
        "counter",
        "Dead letters the broker refused (a full <ns>.dead.<reason>): dropped, not requeued",
        "reason",
    ),
    # worker
    "in_flight": _f("worker_in_flight", "gauge", "Tasks in flight in this process", "agent"),
    "slots": _f("worker_slots", "gauge", "Concurrency of the agent's instances here", "agent"),
    "deliveries": _f(
        "worker_deliveries", "counter", "Deliveries (runs, redeliveries, hand-backs)", "agent"
    ),
    # queues (the observer's `QueueDepthCollector`)
    "queue_ready": _f("queue_messages_ready", "gauge", "Messages ready in a queue", "queue"),
    "queue_unacked": _f(
        "queue_messages_unacked", "gauge", "Messages delivered, not yet acked", "queue"
    ),
    "queue_consumers": _f("queue_consumers", "gauge", "Consumers of a queue", "queue"),
    "management_up": _f(
        "management_up", "gauge", "1 when the last read of the management API succeeded"
    ),
}
