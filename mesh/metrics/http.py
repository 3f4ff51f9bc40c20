"""`MetricsEndpoint`: serves a `Metrics` registry on ``http://HOST:PORT/metrics``.

prometheus_client's own server (`start_http_server`: a WSGI server in a daemon thread),
bound to ``MESH_METRICS_HOST`` (default 127.0.0.1) and ``MESH_METRICS_PORT`` (0: any
free port; `port` says which one it got).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import start_http_server

from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.lifecycle import Lifecycle
from mesh.metrics.core import Metrics

logger = logging.getLogger(__name__)


class MetricsEndpoint(Lifecycle):
    """``await start()`` binds and serves; ``await close()`` stops (idempotent)."""

    def __init__(self, metrics: Metrics, host: str = "127.0.0.1", port: int = 0) -> None:
        self.metrics = metrics
        self.host = host
        self.requested_port = port
        self._server: tuple[WSGIServer, threading.Thread] | None = None

    @property
    def port(self) -> int:
        """The bound port (the one the OS chose for port 0); 0 before `start`."""
        return self._server[0].server_port if self._server is not None else 0

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    async def start(self) -> None:
        """Bind and serve; a second call does nothing.

        Raises:
            ConfigError: the address cannot be bound (the port is taken, the host is not
                this machine's); the message names the settings.
        """
        if self._server is not None:
            return
        try:
            self._server = start_http_server(
                self.requested_port, self.host, registry=self.metrics.registry
            )
        except OSError as exc:
            raise ConfigError(
                f"cannot serve metrics on {self.host}:{self.requested_port} ({exc.strerror or exc})"
                ": set MESH_METRICS_PORT to a free port (0: any) or MESH_METRICS_HOST"
            ) from None
        logger.info("%s metrics on %s", self.metrics.role, self.url)

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        httpd, thread = server
        # shutdown() waits for serve_forever's poll loop (up to half a second): off the loop
        await asyncio.to_thread(httpd.shutdown)
        httpd.server_close()
        await asyncio.to_thread(thread.join, 5.0)


async def serve_metrics(settings: Settings, role: str) -> MetricsEndpoint | None:
    """The started endpoint of a process whose settings ask for one (``MESH_METRICS_PORT``
    set), with a fresh `Metrics` of `role`; None when metrics are off."""
    if settings.metrics_port is None:
        return None
    metrics = Metrics(role=role, namespace=settings.namespace)
    endpoint = MetricsEndpoint(metrics, settings.metrics_host, settings.metrics_port)
    await endpoint.start()
    return endpoint


__all__ = ["MetricsEndpoint", "serve_metrics"]
