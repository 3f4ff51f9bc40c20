"""`mesh.tracing`: trace ids, the sampling rule, the traceparent round trip, span parents."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from mesh.config import Settings
from mesh.schemas import Result, RouteInfo, TaskEnvelope, new_id
from mesh.tracing import ALWAYS_TRACED_PRIORITY, is_traced, otel_trace_id, tracing_for
from mesh.tracing.spans import SCOPE, TRACEPARENT, Tracing


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def make_tracing(provider: TracerProvider, ratio: float = 0.1) -> Tracing:
    settings = Settings(otel=True, otel_sample_ratio=ratio)
    return Tracing.from_settings(settings, provider=provider)


def task(priority: int = 5, **fields: object) -> TaskEnvelope:
    return TaskEnvelope(capability="say hello", priority=priority, **fields)  # type: ignore[arg-type]


# --- trace ids ----------------------------------------------------------------------------
def test_a_new_id_trace_id_is_the_otel_trace_id() -> None:
    trace_id = new_id()
    assert otel_trace_id(trace_id) == int(trace_id, 16)


@pytest.mark.parametrize("trace_id", ["order-42", "A" * 32, "0" * 32, "abc", "x" * 128])
def test_another_trace_id_is_hashed_the_same_way_every_time(trace_id: str) -> None:
    expected = int.from_bytes(hashlib.sha256(trace_id.encode()).digest()[:16], "big")
    assert otel_trace_id(trace_id) == expected == otel_trace_id(trace_id)
    assert 0 < expected < 1 << 128


# --- sampling -------------------------------------------------------------------------------
def test_priority_5_and_above_is_always_traced() -> None:
    for _ in range(500):
        trace_id = otel_trace_id(new_id())
        for priority in range(ALWAYS_TRACED_PRIORITY, 11):
            assert is_traced(trace_id, priority, 0.0)


def test_below_priority_5_the_ratio_decides_from_the_trace_id_alone() -> None:
    ids = [otel_trace_id(new_id()) for _ in range(20_000)]
    assert not any(is_traced(t, 4, 0.0) for t in ids)
    assert all(is_traced(t, 1, 1.0) for t in ids)
    share = sum(is_traced(t, 4, 0.1) for t in ids) / len(ids)
    assert 0.09 < share < 0.11  # 20 000 draws: ~0.002 standard deviation
    # deterministic (every process decides the same) and nested: traced at 10 % stays
    # traced at 30 %, and the priority below 5 does not matter
    for t in ids[:2_000]:
        assert is_traced(t, 4, 0.1) == is_traced(t, 1, 0.1)
        assert not is_traced(t, 4, 0.1) or is_traced(t, 4, 0.3)


# --- settings and the extra being off --------------------------------------------------------
def test_settings_from_the_environment() -> None:
    s = Settings.from_env({"MESH_OTEL": "on", "MESH_OTEL_SAMPLE_RATIO": "0.25"})
    assert (s.otel, s.otel_sample_ratio, s.otel_exporter) == (True, 0.25, "global")
    assert Settings.from_env({}).otel is False
    assert Settings.from_env({}).otel_sample_ratio == 0.1


def test_off_means_no_hooks_and_no_span_machinery_imported() -> None:
    assert tracing_for(Settings()) is None
    # (redis-py imports parts of OpenTelemetry itself when it is installed)
    code = (
        "import sys, mesh, mesh.client, mesh.router.service, mesh.worker.runtime\n"
        "print('mesh.tracing.spans' in sys.modules, 'opentelemetry.trace.propagation"
        ".tracecontext' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False False"


def test_on_without_an_sdk_provider_records_nothing_but_passes_the_trace_on() -> None:
    # in a fresh process: a test before this one may have set the global TracerProvider
    code = """
import logging, io
from opentelemetry import trace
from mesh.config import Settings
from mesh.tracing import tracing_for
from mesh.tracing.spans import TRACEPARENT
from mesh.schemas import TaskEnvelope
log = io.StringIO()
logging.basicConfig(stream=log, level=logging.WARNING)
tracing = tracing_for(Settings(otel=True))
envelope = TaskEnvelope(capability="say hello", priority=5)
headers = {}
with tracing.ingress(envelope, "ex"):
    recording = trace.get_current_span().is_recording()
    tracing.inject(headers)
print("no TracerProvider" in log.getvalue(), recording)
print(str(headers[TRACEPARENT]).startswith(f"00-{envelope.trace_id}-"))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "False", "True"], done


# --- spans and their links -------------------------------------------------------------------
def test_traceparent_round_trip_links_route_to_ingress(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    client, router = make_tracing(provider), make_tracing(provider)
    envelope = task()
    headers: dict[str, object] = {}
    with client.ingress(envelope, "mesh.ingress"):
        client.inject(headers)
    value = headers[TRACEPARENT]
    assert isinstance(value, str)
    version, trace_hex, span_hex, flags = value.split("-")
    assert (version, trace_hex, flags) == ("00", envelope.trace_id, "01")
    # AMQP headers may come back as bytes
    with router.route(envelope, {TRACEPARENT: value.encode()}, "router-1"):
        pass
    ingress, route = exporter.get_finished_spans()
    assert (ingress.name, route.name) == ("mesh.ingress", "mesh.route")
    assert ingress.parent is None  # a true root, with the envelope's trace id
    assert ingress.context is not None and route.context is not None
    assert ingress.context.trace_id == route.context.trace_id == int(envelope.trace_id, 16)
    assert format(ingress.context.span_id, "016x") == span_hex
    assert route.parent is not None and route.parent.span_id == ingress.context.span_id
    assert route.parent.is_remote
    assert route.attributes is not None
    assert route.attributes["mesh.task_id"] == envelope.task_id
    assert route.attributes["mesh.router_id"] == "router-1"


def test_hops_nest_dispatch_under_route_and_handoff_under_handle(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = make_tracing(provider)
    parent = task()
    headers: dict[str, object] = {}
    chosen = RouteInfo(strategy="semantic", score=0.9)
    with tracing.route(parent, {}, "r"), tracing.dispatch(parent, "agent.a", chosen, "ex"):
        tracing.inject(headers)
    child = task(trace_id=parent.trace_id, parent_task_id=parent.task_id, hops=1)
    with tracing.handle(parent, headers, "agent.a", "agent.a-1"):
        with tracing.handoff(child, "agent.a", "agent.a-1", 1000):
            with tracing.ingress(child, "ex"):
                pass
            tracing.annotate(status="completed")
        tracing.annotate(status="failed", code="handler_error")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert len(spans) == 5
    assert len({s.context.trace_id for s in spans.values() if s.context}) == 1

    def parent_of(name: str) -> str | None:
        span = spans[name]
        if span.parent is None:
            return None
        return next(
            n for n, s in spans.items() if s.context and s.context.span_id == span.parent.span_id
        )

    assert parent_of("mesh.route") is None
    assert parent_of("mesh.dispatch") == "mesh.route"
    assert parent_of("mesh.handle") == "mesh.dispatch"
    assert parent_of("mesh.handoff") == "mesh.handle"
    assert parent_of("mesh.ingress") == "mesh.handoff"
    route = spans["mesh.route"].attributes or {}
    assert (route["mesh.status"], route["mesh.agent_id"], route["mesh.route.strategy"]) == (
        "dispatched",
        "agent.a",
        "semantic",
    )
    handle = spans["mesh.handle"]
    assert handle.attributes and handle.attributes["mesh.instance_id"] == "agent.a-1"
    assert handle.attributes["mesh.error.code"] == "handler_error"
    assert handle.status.status_code is StatusCode.ERROR
    handoff = spans["mesh.handoff"].attributes or {}
    assert (handoff["mesh.task_id"], handoff["mesh.status"]) == (child.task_id, "completed")


def test_an_unsampled_trace_records_nothing_and_says_so_downstream(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = make_tracing(provider, ratio=0.0)
    envelope = task(priority=3)
    headers: dict[str, object] = {}
    with tracing.ingress(envelope, "ex"):
        tracing.inject(headers)
    assert str(headers[TRACEPARENT]).endswith("-00")
    assert envelope.trace_id in str(headers[TRACEPARENT])
    # a process that would trace everything follows the flag, not its own ratio
    everything = make_tracing(provider, ratio=1.0)
    forwarded: dict[str, object] = {}
    with everything.route(envelope, headers, "r"):
        everything.inject(forwarded)
    assert str(forwarded[TRACEPARENT]).endswith("-00")
    assert exporter.get_finished_spans() == ()


def test_without_traceparent_every_process_decides_the_same(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    envelopes = [task(priority=2) for _ in range(200)]
    for _process in range(2):
        tracing = make_tracing(provider, ratio=0.5)
        for envelope in envelopes:
            with tracing.route(envelope, {}, "r"):
                pass
    recorded = [s.attributes["mesh.task_id"] for s in exporter.get_finished_spans() if s.attributes]
    once = set(recorded)
    assert 50 < len(once) < 150
    assert sorted(recorded) == sorted([*once, *once])


def test_a_non_hex_trace_id_is_kept_as_an_attribute(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = make_tracing(provider)
    envelope = task(trace_id="order-42")
    with tracing.ingress(envelope, "ex"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.context is not None and span.context.trace_id == otel_trace_id("order-42")
    assert span.attributes and span.attributes["mesh.trace_id"] == "order-42"


def test_a_parent_of_another_trace_becomes_a_link(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = make_tracing(provider)
    envelope = task()
    app = provider.get_tracer("app")
    with app.start_as_current_span("http request") as outer, tracing.ingress(envelope, "ex"):
        pass
    ingress = next(s for s in exporter.get_finished_spans() if s.name == "mesh.ingress")
    assert ingress.parent is None
    assert ingress.context is not None and ingress.context.trace_id == int(envelope.trace_id, 16)
    assert [link.context for link in ingress.links] == [outer.get_span_context()]


def test_the_result_span_continues_the_answering_hop(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = make_tracing(provider)
    envelope = task()
    headers: dict[str, object] = {}
    with tracing.handle(envelope, {}, "agent.a", "agent.a-1"):
        tracing.inject(headers)
    result = Result(
        task_id=envelope.task_id, trace_id=envelope.trace_id, status="completed", agent_id="a"
    )
    with tracing.result(result, headers):
        pass
    with tracing.result(result, {}):  # no traceparent (no hop to continue): no span
        pass
    handle, span = exporter.get_finished_spans()
    assert span.name == "mesh.result"
    assert span.parent is not None and handle.context is not None
    assert span.parent.span_id == handle.context.span_id
    assert span.attributes and span.attributes["mesh.status"] == "completed"


def test_a_relay_passes_the_answering_hop_on_and_records_nothing(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    """A router forwarding a worker's Result (access control): what it publishes carries
    the worker's traceparent, so the caller's result span is the handle span's child."""
    tracing = make_tracing(provider)
    notice: dict[str, object] = {}
    with tracing.handle(task(), {}, "agent.a", "agent.a-1"):
        tracing.inject(notice)
    forwarded: dict[str, object] = {}
    with tracing.relay(notice):
        tracing.inject(forwarded)
    assert forwarded[TRACEPARENT] == notice[TRACEPARENT]
    with tracing.relay({}):  # nothing to pass on
        tracing.inject(empty := {})
    assert empty == {} and len(exporter.get_finished_spans()) == 1


def test_another_tracer_gets_the_trace_id_through_a_remote_parent(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracing = Tracing(provider.get_tracer(SCOPE), 0.1)
    tracing._roots = False  # what a tracer other than the SDK's gets
    envelope = task(trace_id=uuid.uuid4().hex)
    with tracing.ingress(envelope, "ex"):
        pass
    (span,) = exporter.get_finished_spans()
    assert span.context is not None and span.context.trace_id == int(envelope.trace_id, 16)
    assert span.parent is not None and span.parent.is_remote
