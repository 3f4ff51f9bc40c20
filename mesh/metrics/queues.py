"""`QueueDepthCollector`: queue depths of one namespace, from the RabbitMQ management API.

For the observer process: register it on that process's `Metrics` registry and every
scrape reads ``GET /api/queues/<vhost>`` (at most once per `max_age_s`, however many
scrapers ask) and yields ready and unacked messages and consumers per queue.

Labels stay bounded: the shared queues (router, registry, agent queues, retry and dead
letter queues...) by name; the per-process queues (``reply.*``, ``bids.*``,
``snapshot.*``, ``selector.*``, ``session.*``, ``instance.*``, or any other exclusive or
auto-delete queue) summed under ``<ns>.<kind>.*``, since their ids change with every
process.

The read is blocking (urllib) and runs in the scrape's thread, never on an event loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import Metric

from mesh.errors import MeshError
from mesh.management import Management
from mesh.metrics.collectors import family
from mesh.topology import Topology

logger = logging.getLogger(__name__)

#: how long one read of the management API serves scrapes
MAX_AGE_S = 5.0
#: the queue families whose members are per process, as `Topology` names them
_PER_PROCESS = (
    *("reply_queue", "bid_queue", "snapshot_queue"),
    *("selector_queue", "session_queue", "instance_queue"),
)


def queue_label(topology: Topology, queue: dict[str, Any]) -> str | None:
    """The ``queue`` label of a queue of the management API (None: not this namespace's)."""
    name = str(queue.get("name", ""))
    prefix = f"{topology.namespace}."
    if not name.startswith(prefix):
        return None
    for method in _PER_PROCESS:
        family_prefix: str = getattr(topology, method)("")
        if name.startswith(family_prefix):
            return f"{family_prefix}*"
    if queue.get("exclusive") or queue.get("auto_delete"):
        kind = name[len(prefix) :].split(".", 1)[0]
        return f"{prefix}{kind}.*"
    return name


class QueueDepthCollector:
    """Depths of the queues of `topology`'s namespace, read through `management`."""

    def __init__(
        self, management: Management, topology: Topology, *, max_age_s: float = MAX_AGE_S
    ) -> None:
        self.management = management
        self.topology = topology
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._rows: dict[str, tuple[float, float, float]] = {}
        self._up = 0.0

    def describe(self) -> Iterator[Metric]:
        for key in ("queue_ready", "queue_unacked", "queue_consumers", "management_up"):
            yield family(key)

    def collect(self) -> Iterator[Metric]:
        rows, up = self.read()
        ready, unacked, consumers = (
            family(k) for k in ("queue_ready", "queue_unacked", "queue_consumers")
        )
        for label, (r, u, c) in sorted(rows.items()):
            ready.add_metric([label], r)
            unacked.add_metric([label], u)
            consumers.add_metric([label], c)
        yield from (ready, unacked, consumers, family("management_up", up))

    def read(self) -> tuple[dict[str, tuple[float, float, float]], float]:
        """Per ``queue`` label: (ready, unacked, consumers); and 1.0 when the read worked.

        A failed read is logged and yields no queues (a stale depth would mislead).
        """
        with self._lock:
            if time.monotonic() - self._read_at < self.max_age_s:
                return self._rows, self._up
            self._read_at = time.monotonic()
            try:
                queues = self.management.queues()
            except MeshError as exc:
                logger.warning("queue depths not read: %s", exc)
                self._rows, self._up = {}, 0.0
                return self._rows, self._up
            rows: dict[str, tuple[float, float, float]] = {}
            for queue in queues:
                label = queue_label(self.topology, queue)
                if label is None:
                    continue
                r, u, c = rows.get(label, (0.0, 0.0, 0.0))
                rows[label] = (
                    r + float(queue.get("messages_ready") or 0),
                    u + float(queue.get("messages_unacknowledged") or 0),
                    c + float(queue.get("consumers") or 0),
                )
            self._rows, self._up = rows, 1.0
            return self._rows, self._up


__all__ = ["QueueDepthCollector", "queue_label"]
