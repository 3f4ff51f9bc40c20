"""OpenTelemetry spans of a task's hops (the ``otel`` extra of the distribution).

With ``MESH_OTEL=on`` every hop of a task is one span: ``mesh.ingress`` (the client's
publish), ``mesh.route`` and ``mesh.dispatch`` (the router), ``mesh.handle`` (the worker's
claim, handler and settling), ``mesh.handoff`` (a handler passing work on) and
``mesh.result`` (the Result reaching its caller). A process passes its hop on in a W3C
``traceparent`` AMQP header (`mesh.messaging.Publisher.send` writes it on every publish made
inside a span), so the spans of all processes form one trace.

The OTel trace id is the envelope's ``trace_id`` (`otel_trace_id`): itself when it is 32
lowercase hex digits, as `schemas.new_id` makes them, otherwise the first 128 bits of its
SHA-256; every span also carries the envelope's as ``mesh.trace_id``.

Sampling (`is_traced`): every task with priority >= 5, and
``MESH_OTEL_SAMPLE_RATIO`` (10 %) of the others, chosen by a hash of the trace id, so
every process decides the same for one trace. The first hop decides; later hops follow
the ``sampled`` flag of the traceparent.

This package imports no OpenTelemetry module: with ``MESH_OTEL=off`` (the default) nothing
is imported (`tracing_for` gives None, and `mesh.hooks` composes no span hooks).
`mesh.tracing.spans` holds the OpenTelemetry side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesh.distribution import extra_hint
from mesh.errors import ConfigError
from mesh.tracing.ids import ALWAYS_TRACED_PRIORITY, is_traced, otel_trace_id

if TYPE_CHECKING:
    from mesh.config import Settings
    from mesh.tracing.spans import Tracing


def tracing_for(settings: Settings, service: str = "agent-reach") -> Tracing | None:
    """The spans of one component (None with ``MESH_OTEL=off``, importing nothing).

    `service` names the process (``service.name``) when the mesh installs the provider
    (``MESH_OTEL_EXPORTER=console|otlp``); ``OTEL_SERVICE_NAME`` wins over it.

    Raises:
        ConfigError: ``MESH_OTEL=on`` without the OpenTelemetry packages, or an exporter
            whose package is missing.
    """
    if not settings.otel:
        return None
    try:
        from mesh.tracing.spans import Tracing
    except ImportError as exc:
        raise ConfigError(
            f"MESH_OTEL=on needs OpenTelemetry ({exc.name or exc} is missing): "
            f"{extra_hint('otel')}, or set MESH_OTEL=off"
        ) from None
    return Tracing.from_settings(settings, service)


__all__ = ["ALWAYS_TRACED_PRIORITY", "is_traced", "otel_trace_id", "tracing_for"]
