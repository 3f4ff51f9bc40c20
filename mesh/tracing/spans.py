"""`Tracing`: the OpenTelemetry side of `mesh.tracing` (imported only with ``MESH_OTEL=on``).

Each hook is a context manager around one hop; the hot path calls it only when its
component's ``publisher.tracing`` is not None. Inside a hook the hop's span is the current
span, so a publish made there carries it as ``traceparent`` (`Tracing.inject`) and a hop
started there (a handoff's ingress) is its child.

Parents: a consumer hop (route, handle, result) continues the ``traceparent`` of the
message it got; ingress, dispatch and handoff continue the current span. A parent of
another trace (an application span around `MeshClient.send`, a foreign ``traceparent``) is
kept as a span link instead: the trace id is always the envelope's. A hop without a parent
is a root span whose trace id is the envelope's: an SDK tracer (ours alone) is given an id
generator that hands out that id for it; another tracer gets a remote parent with a span
id derived from the trace id, which no process records.

An unsampled hop records nothing: its current span is a non-recording one carrying the
trace id and the ``sampled=0`` flag, so its publishes tell the next process the same.
The mesh samples; leave the SDK's sampler at its default (parent based).
"""

from __future__ import annotations

import contextvars
import hashlib
import logging
import random
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.trace import TracerProvider as SdkTracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.schemas import Result, RouteInfo, TaskEnvelope
from mesh.tracing.ids import is_traced, otel_trace_id

logger = logging.getLogger(__name__)

#: the instrumentation scope of every mesh span
SCOPE = "agent-reach"
#: the AMQP header that carries the hop (W3C Trace Context)
TRACEPARENT = "traceparent"
#: a task's statuses that end a span in error
ERROR_STATUSES = frozenset({"failed", "dead", "unroutable", "expired"})
#: capability text kept on a span
CAPABILITY_CHARS = 256

#: the trace id the next root span of this task gets (set around one `start_span`)
_ROOT_TRACE_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "mesh_root_trace_id", default=None
)


class _EnvelopeIds(IdGenerator):
    """The SDK tracer's id generator, except for a task's root span: the envelope's id."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner

    def generate_span_id(self) -> int:
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        forced = _ROOT_TRACE_ID.get()
        return self.inner.generate_trace_id() if forced is None else forced

    def is_trace_id_random(self) -> bool:
        return _ROOT_TRACE_ID.get() is None and self.inner.is_trace_id_random()


class _HeaderGetter(Getter[Mapping[str, Any]]):
    """Reads AMQP headers, whose strings may arrive as bytes."""

    def get(self, carrier: Mapping[str, Any], key: str) -> list[str] | None:
        value = carrier.get(key)
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        return [value] if isinstance(value, str) else None

    def keys(self, carrier: Mapping[str, Any]) -> list[str]:
        return list(carrier)


_GETTER = _HeaderGetter()
_PROPAGATOR = TraceContextTextMapPropagator()


def _exporter(name: str) -> SpanExporter:
    """The span exporter named by ``MESH_OTEL_EXPORTER`` (``console`` or ``otlp``)."""
    if name == "console":
        return ConsoleSpanExporter()
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # type: ignore[import-not-found,unused-ignore]
            OTLPSpanExporter,
        )
    except ImportError:
        raise ConfigError(
            "MESH_OTEL_EXPORTER=otlp needs the OTLP exporter: pip install "
            "opentelemetry-exporter-otlp-proto-http (or set MESH_OTEL_EXPORTER=global and "
            "configure the SDK yourself)"
        ) from None
    exporter: SpanExporter = OTLPSpanExporter()
    return exporter


def install_provider(exporter: str, service: str) -> trace.TracerProvider:
    """Set an SDK TracerProvider exporting through `exporter` as the process's, unless the
    process has an SDK provider already; returns the process's provider."""
    current = trace.get_tracer_provider()
    if isinstance(current, SdkTracerProvider):
        return current
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service}))
    provider = SdkTracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(_exporter(exporter)))
    trace.set_tracer_provider(provider)
    logger.info("OpenTelemetry spans exported through %s as %s", exporter, service)
    return trace.get_tracer_provider()


def task_attributes(envelope: TaskEnvelope) -> dict[str, AttributeValue]:
    """What every span of a task carries."""
    attributes: dict[str, AttributeValue] = {
        "mesh.task_id": envelope.task_id,
        "mesh.trace_id": envelope.trace_id,
        "mesh.capability": envelope.capability[:CAPABILITY_CHARS],
        "mesh.priority": envelope.priority,
        "mesh.hops": envelope.hops,
    }
    if envelope.parent_task_id is not None:
        attributes["mesh.parent_task_id"] = envelope.parent_task_id
    if envelope.target is not None:
        attributes["mesh.target"] = envelope.target
    return attributes


def route_attributes(agent_id: str, route: RouteInfo) -> dict[str, AttributeValue]:
    """How the router chose: the agent, the strategy and its score."""
    attributes: dict[str, AttributeValue] = {
        "mesh.agent_id": agent_id,
        "mesh.route.strategy": route.strategy,
        "mesh.route.low_confidence": route.low_confidence,
    }
    if route.score is not None:
        attributes["mesh.route.score"] = route.score
    return attributes


class Tracing:
    """The hooks of one component: ``with tracing.route(envelope, headers): ...``."""

    def __init__(self, tracer: trace.Tracer, sample_ratio: float) -> None:
        self.tracer = tracer
        #: the share of priority < 5 traces recorded (`mesh.tracing.is_traced`)
        self.sample_ratio = sample_ratio
        #: True: root spans take the envelope's trace id from our id generator
        self._roots = isinstance(tracer, SdkTracer)
        if self._roots:
            assert isinstance(tracer, SdkTracer)
            tracer.id_generator = _EnvelopeIds(tracer.id_generator)

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        service: str = SCOPE,
        provider: trace.TracerProvider | None = None,
    ) -> Tracing:
        """Hooks on `provider` (default: the process's, installed first when
        ``MESH_OTEL_EXPORTER`` names an exporter)."""
        if provider is None:
            if settings.otel_exporter != "global":
                provider = install_provider(settings.otel_exporter, service)
            else:
                provider = trace.get_tracer_provider()
                if isinstance(provider, trace.ProxyTracerProvider):
                    logger.warning(
                        "MESH_OTEL=on but this process has no TracerProvider yet: spans are "
                        "dropped until one is set (opentelemetry.trace.set_tracer_provider, "
                        "opentelemetry-instrument, or MESH_OTEL_EXPORTER=console|otlp)"
                    )
        return cls(provider.get_tracer(SCOPE), settings.otel_sample_ratio)

    # --- the hops -----------------------------------------------------------------------
    def ingress(self, envelope: TaskEnvelope, exchange: str) -> AbstractContextManager[Span]:
        """A client publishing a task (a root, or the child of a handoff span)."""
        attributes = task_attributes(envelope)
        attributes["messaging.system"] = "rabbitmq"
        attributes["messaging.destination.name"] = exchange
        return self._hop("mesh.ingress", SpanKind.PRODUCER, envelope, _current(), attributes)

    def route(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], router_id: str
    ) -> AbstractContextManager[Span]:
        """A router taking a task from its queue (from ingress or back from an agent)."""
        attributes = task_attributes(envelope)
        attributes["mesh.router_id"] = router_id
        attributes["mesh.reroutes"] = envelope.reroutes
        return self._hop("mesh.route", SpanKind.CONSUMER, envelope, _remote(headers), attributes)

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo, exchange: str
    ) -> AbstractContextManager[Span]:
        """The router publishing a task to its agent; notes the choice on the route span."""
        self.chose(agent_id, route)
        self.annotate(status="dispatched")
        attributes = {**task_attributes(envelope), **route_attributes(agent_id, route)}
        attributes["messaging.system"] = "rabbitmq"
        attributes["messaging.destination.name"] = exchange
        return self._hop("mesh.dispatch", SpanKind.PRODUCER, envelope, _current(), attributes)

    def handle(
        self,
        envelope: TaskEnvelope,
        headers: Mapping[str, Any],
        agent_id: str,
        instance_id: str,
    ) -> AbstractContextManager[Span]:
        """A worker running a delivery: claim, handler, settling."""
        attributes = task_attributes(envelope)
        attributes["mesh.agent_id"] = agent_id
        attributes["mesh.instance_id"] = instance_id
        attributes["mesh.attempt"] = envelope.attempt
        return self._hop("mesh.handle", SpanKind.CONSUMER, envelope, _remote(headers), attributes)

    def handoff(
        self, child: TaskEnvelope, agent_id: str, instance_id: str, budget_ms: int
    ) -> AbstractContextManager[Span]:
        """A handler passing work on and waiting for it (a child of its handle span)."""
        attributes = task_attributes(child)
        attributes["mesh.agent_id"] = agent_id
        attributes["mesh.instance_id"] = instance_id
        attributes["mesh.handoff.budget_ms"] = budget_ms
        return self._hop("mesh.handoff", SpanKind.CLIENT, child, _current(), attributes)

    @contextmanager
    def result(self, result: Result, headers: Mapping[str, Any]) -> Iterator[None]:
        """A Result reaching its caller: a child of the hop that answered (its
        ``traceparent``); nothing is recorded for a Result that carries none."""
        parent = _remote(headers)
        if parent is None or result.trace_id is None:
            yield
            return
        attributes: dict[str, AttributeValue] = {
            "mesh.task_id": result.task_id,
            "mesh.trace_id": result.trace_id,
            "mesh.status": result.status,
        }
        if result.agent_id is not None:
            attributes["mesh.agent_id"] = result.agent_id
        if result.instance_id is not None:
            attributes["mesh.instance_id"] = result.instance_id
        if result.route is not None:
            attributes["mesh.route.strategy"] = result.route.strategy
        if result.error is not None:
            attributes["mesh.error.code"] = result.error.code
        trace_id = otel_trace_id(result.trace_id)
        with self._open("mesh.result", SpanKind.CONSUMER, trace_id, None, parent, attributes):
            yield

    def relay(self, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        """Publishes inside carry the ``traceparent`` of `headers`, recording nothing: a
        router forwarding a worker's Result keeps the caller's ``mesh.result`` a child of
        the hop that answered."""
        parent = _remote(headers)
        return nullcontext() if parent is None else trace.use_span(NonRecordingSpan(parent))

    # --- inside a hop ---------------------------------------------------------------------
    def annotate(self, status: str, code: str | None = None) -> None:
        """Note on the current span the task's status (``mesh.status``; an error status
        marks the span failed) and an error code (``mesh.error.code``)."""
        span = trace.get_current_span()
        if not span.is_recording():
            return
        span.set_attribute("mesh.status", status)
        if code:
            span.set_attribute("mesh.error.code", code)
        if status in ERROR_STATUSES:
            span.set_status(Status(StatusCode.ERROR, code or status))

    def chose(self, agent_id: str, route: RouteInfo) -> None:
        """Note on the current span the agent the router chose and how."""
        span = trace.get_current_span()
        if span.is_recording():
            span.set_attributes(route_attributes(agent_id, route))

    def inject(self, headers: MutableMapping[str, Any]) -> None:
        """Write the current hop into `headers` as ``traceparent`` (nothing outside a hop)."""
        if trace.get_current_span().get_span_context().is_valid:
            _PROPAGATOR.inject(headers)

    # --- machinery ------------------------------------------------------------------------
    def _hop(
        self,
        name: str,
        kind: SpanKind,
        envelope: TaskEnvelope,
        candidate: SpanContext | None,
        attributes: dict[str, AttributeValue],
    ) -> AbstractContextManager[Span]:
        trace_id = otel_trace_id(envelope.trace_id)
        return self._open(name, kind, trace_id, envelope.priority, candidate, attributes)

    def _open(
        self,
        name: str,
        kind: SpanKind,
        trace_id: int,
        priority: int | None,
        candidate: SpanContext | None,
        attributes: dict[str, AttributeValue],
    ) -> AbstractContextManager[Span]:
        """The hop's span as the current one: a child of `candidate` when it is of this
        trace, else a root (linked to `candidate`), sampled as `mesh.tracing` says."""
        parent = candidate if candidate is not None and candidate.trace_id == trace_id else None
        links: Sequence[Link] = (Link(candidate),) if candidate and parent is None else ()
        if parent is not None:
            sampled = parent.trace_flags.sampled
        else:
            sampled = priority is not None and is_traced(trace_id, priority, self.sample_ratio)
        if not sampled:
            quiet = parent or SpanContext(
                trace_id, random.getrandbits(64) or 1, is_remote=False, trace_flags=TraceFlags(0)
            )
            return trace.use_span(NonRecordingSpan(quiet))
        span = self._start(name, kind, trace_id, parent, attributes, links)
        return trace.use_span(span, end_on_exit=True)

    def _start(
        self,
        name: str,
        kind: SpanKind,
        trace_id: int,
        parent: SpanContext | None,
        attributes: dict[str, AttributeValue],
        links: Sequence[Link],
    ) -> Span:
        if parent is None and self._roots:
            # a root: our id generator hands this span the envelope's trace id
            token = _ROOT_TRACE_ID.set(trace_id)
            try:
                return self.tracer.start_span(
                    name, Context(), kind, attributes=attributes, links=links
                )
            finally:
                _ROOT_TRACE_ID.reset(token)
        if parent is None:
            # another tracer: a remote parent nobody records carries the trace id
            parent = SpanContext(
                trace_id,
                _phantom_span_id(trace_id),
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
            )
        context = trace.set_span_in_context(NonRecordingSpan(parent), Context())
        return self.tracer.start_span(name, context, kind, attributes=attributes, links=links)


def _current() -> SpanContext | None:
    """The current span's context, when there is one."""
    span_context = trace.get_current_span().get_span_context()
    return span_context if span_context.is_valid else None


def _remote(headers: Mapping[str, Any]) -> SpanContext | None:
    """The hop a message's ``traceparent`` names, when it has a valid one."""
    if TRACEPARENT not in headers:
        return None
    context = _PROPAGATOR.extract(headers, getter=_GETTER)
    span_context = trace.get_current_span(context).get_span_context()
    return span_context if span_context.is_valid else None


def _phantom_span_id(trace_id: int) -> int:
    """The span id of the unrecorded parent of a trace's roots (a non-SDK tracer only)."""
    digest = hashlib.sha256(trace_id.to_bytes(16, "big")).digest()
    return int.from_bytes(digest[:8], "big") or 1


__all__ = ["SCOPE", "TRACEPARENT", "Tracing", "install_provider"]
