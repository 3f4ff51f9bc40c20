"""OpenTelemetry spans of a task's hops (the ``otel`` extra: ``pip install agent-reach[otel]``).

With ``MESH_OTEL=on`` every hop of a task is one span: ``mesh.ingress`` (the client's
publish), ``mesh.route`` and ``mesh.dispatch`` (the router), ``mesh.handle`` (the worker's
claim, handler and settling), ``mesh.handoff`` (a handler passing work on) and
``mesh.result`` (the Result reaching its caller). A process passes its hop on in a W3C
``traceparent`` AMQP header (`mesh.messaging.Publisher.send` writes it on every publish made
inside a span), so the spans of all processes form one trace.

The OTel trace id is the envelope's ``trace_id`` (`otel_trace_id`): itself when it is 32
lowercase hex digits, as `schemas.new_id` makes them, otherwise the first 128 bits of its
SHA-256; every span also carries the envelope's as ``mesh.trace_id``.

Sampling (seed 000 section 5.2, `is_traced`): every task with priority >= 5, and
``MESH_OTEL_SAMPLE_RATIO`` (10 %) of the others, chosen by a hash of the trace id, so
every process decides the same for one trace. The first hop decides; later hops follow
the ``sampled`` flag of the traceparent.

This package imports no OpenTelemetry module: with ``MESH_OTEL=off`` (the default) nothing
is imported and the hot path pays one ``is None`` check per hook (`tracing_for` gives None).
`mesh.tracing.spans` holds the OpenTelemetry side.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING

from mesh.errors import ConfigError

if TYPE_CHECKING:
    from mesh.config import Settings
    from mesh.tracing.spans import Tracing

#: tasks of this priority and above are always traced (seed 000 section 5.2)
ALWAYS_TRACED_PRIORITY = 5
#: an envelope trace_id that is an OTel trace id already (what `schemas.new_id` makes)
_OTEL_HEX = re.compile(r"[0-9a-f]{32}")


def otel_trace_id(trace_id: str) -> int:
    """The OTel trace id of an envelope's `trace_id`: the trace_id itself when it is 32
    lowercase hex digits (and not all zeros), else the first 128 bits of its SHA-256."""
    if _OTEL_HEX.fullmatch(trace_id):
        value = int(trace_id, 16)
        if value:
            return value
    digest = hashlib.sha256(trace_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


def is_traced(trace_id: int, priority: int, ratio: float) -> bool:
    """Whether the trace of a task is recorded: always at priority >= 5, else when the
    first 64 bits of the SHA-256 of its OTel `trace_id` fall in the first `ratio` of
    their range (hashed: a uuid4's low 64 bits start with fixed variant bits, and a
    caller's ids may count up)."""
    if priority >= ALWAYS_TRACED_PRIORITY:
        return True
    digest = hashlib.sha256(trace_id.to_bytes(16, "big")).digest()
    return int.from_bytes(digest[:8], "big") < int(ratio * (1 << 64))


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
            "pip install 'agent-reach[otel]', or set MESH_OTEL=off"
        ) from None
    return Tracing.from_settings(settings, service)


__all__ = ["ALWAYS_TRACED_PRIORITY", "is_traced", "otel_trace_id", "tracing_for"]
