"""OpenTelemetry spans form one trace across processes: the client and the router run here,
`mesh worker` runs in a subprocess whose agent module sets a TracerProvider that writes
its spans to a JSON-lines file. A task handed off once gives one span per hop, all with
the envelope's trace id, each the child of the hop before it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.registry.state import load_state
from mesh.schemas import now_ms
from mesh.services import start_registry
from tests.conftest import Cleanup, wait_until
from tests.integration.dispatch_kit import start_router

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.access_off("the worker subprocess logs in with the default settings"),
]

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
#: the hops the worker process records: both handles, the handoff, its ingress and Result
WORKER_HOPS = sorted(["mesh.handle"] * 2 + ["mesh.handoff", "mesh.ingress", "mesh.result"])

AGENTS_MODULE = textwrap.dedent(
    '''
    """Two agents whose process writes its spans to $SPANS_FILE, one JSON object a line."""
    import json
    import os

    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult

    from mesh import Agent


    class JsonLines(SpanExporter):
        def __init__(self, path):
            self.path = path

        def export(self, spans):
            with open(self.path, "a") as out:
                for s in spans:
                    parent = s.parent
                    out.write(json.dumps({
                        "name": s.name,
                        "trace_id": format(s.context.trace_id, "032x"),
                        "span_id": format(s.context.span_id, "016x"),
                        "parent_id": None if parent is None else format(parent.span_id, "016x"),
                        "attributes": dict(s.attributes),
                    }) + "\\n")
            return SpanExportResult.SUCCESS


    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(JsonLines(os.environ["SPANS_FILE"])))
    trace.set_tracer_provider(provider)

    relay = Agent("trace.relay", "Passes the question on to the echo agent.")
    echo = Agent("trace.echo", "Repeats what it is told.")


    @relay.handler
    async def _relay(task, ctx):
        answer = await ctx.handoff("repeat it", {"said": task.payload["said"]}, target="trace.echo")
        return {"via": "relay", "echo": answer.output}


    @echo.handler
    async def _echo(task, ctx):
        return {"said": task.payload["said"]}
    '''
)


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5, otel=True)


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """The spans of this process: the process's SDK provider (set once) feeds them here."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield exporter
    exporter.shutdown()  # its processor stays on the provider, but keeps nothing more


@pytest.fixture
def worker_process(
    settings: Settings, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """`mesh worker trace_agents:*` with MESH_OTEL=on; its spans go to a file."""
    (tmp_path / "trace_agents.py").write_text(AGENTS_MODULE)
    spans = tmp_path / "spans.jsonl"
    env = {
        **os.environ,
        "MESH_NAMESPACE": settings.namespace,
        "MESH_HEARTBEAT_S": "0.5",
        "MESH_LEASE_TTL_S": "1.5",
        "MESH_OTEL": "on",
        "SPANS_FILE": str(spans),
    }
    with (tmp_path / "worker.err").open("wb") as err:
        proc = subprocess.Popen(
            [MESH, "worker", "trace_agents:*"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    yield proc, spans
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _as_record(span: ReadableSpan) -> dict[str, Any]:
    assert span.context is not None
    return {
        "name": span.name,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
        "parent_id": None if span.parent is None else format(span.parent.span_id, "016x"),
        "attributes": dict(span.attributes or {}),
        "here": True,
    }


def _file_records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def test_spans_of_a_handed_off_task_form_one_trace_across_two_processes(
    conn: MeshConnection,
    add_cleanup: Cleanup,
    exporter: InMemorySpanExporter,
    worker_process: tuple[subprocess.Popen[bytes], Path],
    tmp_path: Path,
) -> None:
    proc, spans_file = worker_process
    add_cleanup(await start_registry(conn))
    await start_router(conn, add_cleanup)

    async def live() -> bool:
        assert proc.poll() is None, (tmp_path / "worker.err").read_text()
        state = await load_state(conn.redis, conn.keys)
        now = now_ms()
        return all(a in state and state[a].is_live(now) for a in ("trace.relay", "trace.echo"))

    await wait_until(live, timeout=60, interval=0.2)
    async with MeshClient(conn) as client:
        result = await client.request("relay this", {"said": "hi"}, target="trace.relay", wait_s=30)
    assert result.status == "completed", result
    assert result.output == {"via": "relay", "echo": {"said": "hi"}}
    trace_id = result.trace_id
    assert trace_id is not None

    def worker_spans() -> list[dict[str, Any]]:
        found = _file_records(spans_file)
        return found if sorted(s["name"] for s in found) == WORKER_HOPS else []

    # the worker's last span (its relay's handle) ends once the Result is out: wait for it
    remote = await wait_until(worker_spans, timeout=10)
    here = [_as_record(s) for s in exporter.get_finished_spans()]
    here = [s for s in here if s["attributes"].get("mesh.trace_id") == trace_id]
    spans = here + remote
    assert {s["trace_id"] for s in spans} == {trace_id}  # the envelope's trace_id, as is
    by_id = {s["span_id"]: s for s in spans}
    assert len(by_id) == len(spans) == 11

    relay_task = result.task_id
    child_task = next(
        s["attributes"]["mesh.task_id"] for s in remote if s["name"] == "mesh.handoff"
    )

    def hop(name: str, task_id: str) -> dict[str, Any]:
        (found,) = [
            s for s in spans if s["name"] == name and s["attributes"]["mesh.task_id"] == task_id
        ]
        return found

    def parent(span: dict[str, Any]) -> str:
        up = by_id[span["parent_id"]]
        task = "relay" if up["attributes"]["mesh.task_id"] == relay_task else "echo"
        return f"{up['name']}/{task}"

    ingress = hop("mesh.ingress", relay_task)
    assert ingress["parent_id"] is None and ingress.get("here")  # the root, in this process
    assert parent(hop("mesh.route", relay_task)) == "mesh.ingress/relay"
    assert parent(hop("mesh.dispatch", relay_task)) == "mesh.route/relay"
    relay = hop("mesh.handle", relay_task)
    assert not relay.get("here") and parent(relay) == "mesh.dispatch/relay"
    assert parent(hop("mesh.handoff", child_task)) == "mesh.handle/relay"
    assert parent(hop("mesh.ingress", child_task)) == "mesh.handoff/echo"
    assert hop("mesh.route", child_task).get("here")
    assert parent(hop("mesh.route", child_task)) == "mesh.ingress/echo"
    assert parent(hop("mesh.dispatch", child_task)) == "mesh.route/echo"
    assert parent(hop("mesh.handle", child_task)) == "mesh.dispatch/echo"
    # each Result continues the hop that answered: echo's in the worker, relay's here
    assert parent(hop("mesh.result", child_task)) == "mesh.handle/echo"
    answer = hop("mesh.result", relay_task)
    assert answer.get("here") and parent(answer) == "mesh.handle/relay"

    assert relay["attributes"]["mesh.agent_id"] == "trace.relay"
    assert relay["attributes"]["mesh.instance_id"] == result.instance_id
    assert relay["attributes"]["mesh.status"] == "completed"
    dispatch = hop("mesh.dispatch", child_task)["attributes"]
    assert (dispatch["mesh.agent_id"], dispatch["mesh.route.strategy"]) == ("trace.echo", "target")
    assert hop("mesh.route", relay_task)["attributes"]["mesh.status"] == "dispatched"
    assert answer["attributes"]["mesh.status"] == "completed"
