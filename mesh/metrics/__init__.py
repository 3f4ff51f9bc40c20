"""Prometheus metrics of the mesh processes (``MESH_METRICS_PORT``; README "Operating it").

- `mesh.metrics.names`: every metric's name, kind, help and labels.
- `Metrics` (`mesh.metrics.core`): one per process, its own registry; components take
  ``metrics: Metrics | None`` and record facts where they compute them.
- `mesh.metrics.collectors`: what the watched components count, read at scrape time.
- `QueueDepthCollector` (`mesh.metrics.queues`): queue depths from the management API,
  for the observer.
- `MetricsEndpoint` (`mesh.metrics.http`): the ``/metrics`` HTTP endpoint.
"""

from mesh.metrics.core import DISPATCHED_HEADER, Metrics, dispatch_headers
from mesh.metrics.http import MetricsEndpoint, serve_metrics
from mesh.metrics.queues import QueueDepthCollector

__all__ = [
    "DISPATCHED_HEADER",
    "Metrics",
    "MetricsEndpoint",
    "QueueDepthCollector",
    "dispatch_headers",
    "serve_metrics",
]
