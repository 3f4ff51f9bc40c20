"""The observer against the real broker and Redis: traces, `mesh trace`, alerts, stats."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.cli.trace import load_trace
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.observer import Observer
from mesh.router.embedding import HashEmbedder
from mesh.schemas import TaskEnvelope
from tests.conftest import wait_until
from tests.integration.dispatch_kit import EventTap, start_router, start_worker
from tests.integration.routing_kit import SemanticMesh

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]

StartObserver = Callable[..., Awaitable[Observer]]


@pytest.fixture
async def observer(
    conn: MeshConnection, tmp_path: Path, add_cleanup: Any
) -> AsyncIterator[StartObserver]:
    """``await observer(**settings)``: an observer of the test's namespace, logging in
    `tmp_path`/logs, on a connection of its own (closed at teardown)."""

    async def start(**overrides: Any) -> Observer:
        settings = conn.settings.model_copy(
            update={"observer_log_dir": tmp_path / "logs", **overrides}
        )
        own = await connect(settings, name="test-observer")
        add_cleanup(own.close)
        obs = Observer(own)
        await obs.start()
        add_cleanup(obs.close)
        return obs

    yield start


def front_and_back() -> tuple[Agent, Agent]:
    """`front` hands each task to `back` (a second hop of the same trace)."""
    front = Agent("front", "Takes the request and asks the back office")
    back = Agent("back", "Does the actual work")

    @front.handler
    async def ask(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        inner = await ctx.handoff("do the work", {"n": 1}, target="back")
        return {"inner": inner.status}

    @back.handler
    async def work(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"done": True}

    return front, back


async def run_cli(settings: Settings, cwd: Path, *args: str) -> tuple[int, str, str]:
    """``python -m mesh.cli.main ARGS`` from `cwd`, as a user runs it."""
    env = {**os.environ, "MESH_NAMESPACE": settings.namespace, "PYTHONPATH": str(ROOT)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mesh.cli.main",
        *args,
        cwd=cwd,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def alert_lines(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "logs" / "alerts.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


async def test_a_two_hop_request_shows_both_hops_in_mesh_trace(
    conn: MeshConnection, add_cleanup: Any, observer: StartObserver, tmp_path: Path
) -> None:
    obs = await observer()
    await start_router(conn, add_cleanup)
    front, back = front_and_back()
    await start_worker(conn, add_cleanup, front)
    await start_worker(conn, add_cleanup, back)
    async with MeshClient(conn) as client:
        result = await client.request("help me", target="front", wait_s=20)
    assert result.status == "completed" and result.trace_id
    trace_id = result.trace_id

    async def both_finished() -> bool:
        stored = await obs.traces.events(trace_id)
        return len({e.task_id for e in stored if e.type == "task.completed"}) == 2

    await wait_until(both_finished, timeout=10)

    code, out, err = await run_cli(conn.settings, tmp_path, "trace", trace_id)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith(f"trace {trace_id}: 2 task(s), 1 root(s) (from observer)")
    first = next(i for i, line in enumerate(lines) if "agent=front" in line)
    second = next(i for i, line in enumerate(lines) if "agent=back" in line)
    assert first < second and "handoff task" in lines[second]
    assert f"task {result.task_id}" in lines[first] and "status=completed" in lines[first]
    assert "strategy=target" in lines[second]
    assert sum("timings:" in line and "handler" in line for line in lines) == 2
    assert any("processing" in line and "ms" in line for line in lines[second:])

    code, out, err = await run_cli(conn.settings, tmp_path, "trace", trace_id, "--json")
    assert code == 0, err
    tree = json.loads(out)
    (root,) = tree["hops"]
    (child,) = root["handoffs"]
    assert (root["agent_id"], child["agent_id"]) == ("front", "back")
    assert root["task_id"] == result.task_id and child["status"] == "completed"
    assert child["instance_id"] and child["timings"]["handler_ms"] >= 0
    assert [s["state"] for s in child["states"]][-1] == "completed"
    assert root["states"][0]["ts_ms"] <= child["states"][0]["ts_ms"]

    # the logs: every event of the trace, the decisions apart
    trace_log = (tmp_path / "logs" / "trace.jsonl").read_text().splitlines()
    decisions = (tmp_path / "logs" / "decisions.jsonl").read_text().splitlines()
    assert sum(json.loads(x)["trace_id"] == trace_id for x in trace_log) >= 2
    assert {json.loads(x)["agent_id"] for x in decisions} == {"front", "back"}

    # the figures, through `mesh stats --once --json`
    await obs.store_figures()
    code, out, err = await run_cli(conn.settings, tmp_path, "stats", "--once", "--json")
    assert code == 0, err
    view = json.loads(out)
    assert view["figures"]["agents"]["back"]["tasks"] == {"completed": 1}
    assert view["figures"]["agents"]["front"]["success_rate"] == 1.0
    assert conn.topology.agent_queue("back", "normal") in {q["name"] for q in view["queues"]}

    # unknown and malformed ids
    code, _, err = await run_cli(conn.settings, tmp_path, "trace", "no-such-trace")
    assert code == 1 and "no trace no-such-trace" in err
    code, _, err = await run_cli(conn.settings, tmp_path, "trace", "bad id!")
    assert code == 2 and len(err.strip().splitlines()) == 1


async def test_without_an_observer_mesh_trace_reads_the_task_records(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    front, back = front_and_back()
    await start_worker(conn, add_cleanup, front)
    await start_worker(conn, add_cleanup, back)
    async with MeshClient(conn) as client:
        result = await client.request("help me", target="front", wait_s=20)
    assert result.trace_id
    trace = await load_trace(conn.settings, result.trace_id)
    assert trace.source == "task records" and trace.complete
    (root,) = trace.roots
    assert root.agent_id == "front" and [c.agent_id for c in root.children] == ["back"]
    assert root.children[0].timings["handler_ms"] >= 0


def bouncer(agent_id: str, other: str) -> Agent:
    agent = Agent(agent_id, f"Bounces work to {other}")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        inner = await ctx.handoff("bounce it back", target=other)
        return {"inner": inner.status}

    return agent


async def test_a_forced_loop_raises_alert_loop_and_the_observer_logs_it(
    conn: MeshConnection, add_cleanup: Any, observer: StartObserver, tmp_path: Path
) -> None:
    obs = await observer()
    tap = await EventTap.open(conn, add_cleanup, "alert.#")
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, bouncer("ping", "pong"))
    await start_worker(conn, add_cleanup, bouncer("pong", "ping"))
    async with MeshClient(conn) as client:
        result = await client.request("rally", target="ping", max_hops=5, wait_s=25)
    assert result.trace_id

    def logged() -> list[dict[str, Any]]:
        return [a for a in alert_lines(tmp_path) if a["alert"] == "loop"]

    (line,) = await wait_until(logged, timeout=10)
    assert (line["state"], line["agent_id"], line["trace_id"]) == (
        "raised",
        "ping",
        result.trace_id,
    )
    assert f"loop:{result.trace_id}/ping" in {a.key for a in obs.rules.book.recent}
    # the alert is on the exchange: the worker's, and the observer's (which saw it first
    # or relayed it without publishing again)
    loops = await wait_until(lambda: tap.of("alert.loop"), timeout=5)
    assert all(e.agent_id == "ping" and e.trace_id == result.trace_id for e in loops)
    assert len([e for e in loops if e.data.get("source") == "observer"]) <= 1


async def test_a_burst_of_unmatched_requests_raises_the_no_match_alert(
    conn: MeshConnection, observer: StartObserver, tmp_path: Path, add_cleanup: Any
) -> None:
    obs = await observer(observer_min_samples=5, observer_window_s=120)
    tap = await EventTap.open(conn, add_cleanup, "alert.#")
    embedder = HashEmbedder()
    embedder.start()
    mesh = SemanticMesh(conn, embedder)
    add_cleanup(mesh.close)
    await mesh.start()  # a registry and a semantic router, and no agent to match anything
    async with MeshClient(conn) as client:
        results = await asyncio.gather(
            *(client.request(f"compose haiku number {i}", wait_s=20) for i in range(6))
        )
    assert {r.status for r in results} == {"unroutable"}

    (raised,) = await wait_until(lambda: tap.of("alert.no_match"), timeout=10)
    assert raised.data["state"] == "raised" and raised.data["source"] == "observer"
    assert raised.data["ratio"] == 1.0 and raised.data["decisions"] >= 5
    assert "no_match:mesh" in obs.rules.book.active
    lines = [a for a in alert_lines(tmp_path) if a["alert"] == "no_match"]
    assert [a["state"] for a in lines] == ["raised"]  # once, not once per request


async def test_mesh_observer_runs_and_stops_cleanly_on_ctrl_c(
    conn: MeshConnection, tmp_path: Path, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)  # the namespace exists
    env = {
        **os.environ,
        "MESH_NAMESPACE": conn.settings.namespace,
        "MESH_OBSERVER_LOG_DIR": str(tmp_path / "logs"),
        "PYTHONPATH": str(ROOT),
    }
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "mesh.cli.main",
        "observer",
        "--name",
        "cli",
        cwd=tmp_path,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    add_cleanup(lambda: proc.returncode is None and proc.kill())
    assert proc.stdout is not None
    started = (await asyncio.wait_for(proc.stdout.readline(), timeout=30)).decode()
    assert f"started (namespace {conn.settings.namespace}, name cli)" in started
    assert conn.topology.observer_queue("guest", "cli") in started
    running = (await asyncio.wait_for(proc.stdout.readline(), timeout=10)).decode()
    # the service's own line: namespace and the connection the management UI shows
    where = f"(namespace {conn.settings.namespace}, connection {conn.settings.namespace}/observer/"
    assert running.startswith(f"mesh-observer running {where}"), running
    proc.send_signal(signal.SIGINT)
    out, err = await asyncio.wait_for(proc.communicate(), timeout=20)
    assert proc.returncode == 0, err
    assert "events, " in out.decode() and f"mesh-observer stopped {where}" in out.decode()
    assert (tmp_path / "logs" / "trace.jsonl").exists()
