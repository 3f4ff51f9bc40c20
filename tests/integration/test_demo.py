"""`mesh demo --quick` as a user runs it: separate processes, every story, a green summary.

Asserts each expected outcome from the demo's JSON summary, and the refund of the SIGKILL
story applied exactly once, read from Redis (the demo keeps its namespace; the test
deletes it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from mesh.config import Settings
from mesh.connection import connect
from mesh.demo.run import clear_namespace

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.access_off("the demo runs its own processes, without access control"),
]

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
STORIES = {
    "routine",
    "compound",
    "sigkill",
    "frozen",
    "breaker",
    "max_hops",
    "fallback",
    "contract",
    "malformed",
    "assistant",
}
#: the Node.js agent runs when node and npm are installed (the demo runs ``npm ci``)
HAS_NODE = shutil.which("node") is not None and shutil.which("npm") is not None


def _live_pids(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        alive.append(pid)
    return alive


async def test_the_quick_demo_meets_every_expectation(namespace: str, tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MESH_DEMO_LLM_")}
    env["PYTHONPATH"] = str(ROOT)
    try:
        done = await asyncio.to_thread(
            subprocess.run,
            [MESH, "demo", "--quick", "--namespace", namespace, "--json", str(summary_path)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        summary = json.loads(summary_path.read_text())
        assert summary["ok"] and summary["failed"] == []
        assert {o["story"] for o in summary["outcomes"]} == STORIES | (
            {"node"} if HAS_NODE else set()
        )
        assert all(o["ok"] for o in summary["outcomes"])
        by_story: dict[str, list[dict[str, object]]] = {}
        for o in summary["outcomes"]:
            by_story.setdefault(o["story"], []).append(o)
        compound = by_story["compound"][0]
        assert compound["agent_id"] == "cs.reception" and compound["status"] == "completed"
        assert summary["facts"]["compound trace"] == compound["trace_id"]
        assert summary["facts"]["refund side effects for A-1007"] == 1
        assert summary["dead_letters"]["invalid"] >= 1 and summary["dead_letters"]["hops"] >= 1
        assert by_story["contract"][0]["status"] == "failed"
        assert all(o["agent_id"] == "cs.fallback" for o in by_story["fallback"])
        # every agent of the team answered something, most of it successfully
        assert set(summary["agents"]) >= {
            "cs.reception",
            "cs.orders",
            "cs.after_sales",
            "cs.logistics",
            "cs.complaints",
            "cs.content",
            "cs.knowledge",
            "cs.log_analysis",
            "cs.fallback",
            "cs.assistant",
        }
        assert "route  cs.orders" in done.stdout  # decisions printed as they happen
        # the knowledge base answered through the HTTP bridge: its endpoint saw each task
        logs = ROOT / ".demo-logs" / namespace  # kept: a --namespace of the caller's
        backend_log = (logs / "knowledge-backend.log").read_text()
        knowledge = [o for o in summary["outcomes"] if o["agent_id"] == "cs.knowledge"]
        assert knowledge and all(o["ok"] for o in knowledge)
        assert all(f"task_id={o['task_id']} " in backend_log for o in knowledge)
        # the Node.js agent answered its request (or the demo said in one line why not)
        if HAS_NODE:
            assert by_story["node"] and all(
                o["agent_id"] == "cs.text_stats" for o in by_story["node"]
            )
            assert summary["agents"]["cs.text_stats"]["completed"] == len(by_story["node"])
            assert summary["facts"]["Node.js agent"] == "cs.text_stats answered 1 of 1"
        else:
            assert summary["facts"]["Node.js agent"].startswith("skipped (")
            assert done.stdout.count("demo: skipping cs.text_stats: ") == 1
        # every agent's p50 is known, whichever of decision and outcome came first
        assert all(row["p50_ms"] is not None for row in summary["agents"].values())
        assert f"mesh trace {compound['trace_id']}" in done.stdout
        settings = Settings.from_env(namespace=namespace)
        async with await connect(settings, name="test-demo") as conn:
            applied = await conn.redis.get(conn.keys.side_effect("refund:A-1007"))
            assert int(applied) == 1
            refund = json.loads(await conn.redis.get(conn.keys.demo("refund:A-1007")))
            assert refund["status"] == "refunded"
            assert refund["instance_id"] != summary["facts"]["killed instance"]
    finally:
        async with await connect(Settings.from_env(namespace=namespace), name="test-demo") as c:
            await clear_namespace(c)
        shutil.rmtree(ROOT / ".demo-logs" / namespace, ignore_errors=True)


def test_the_demo_outside_a_checkout_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [MESH, "demo", "--app-dir", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0
    assert "runs from a checkout of the repository" in done.stderr


def test_ctrl_c_stops_every_process_of_the_demo(namespace: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    demo = subprocess.Popen(
        [MESH, "demo", "--quick", "--namespace", namespace, "--cleanup"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert demo.stdout is not None
    try:
        for line in demo.stdout:  # interrupt while the team runs
            if "the team is registered" in line:
                break
        children = _children_of(demo.pid)
        assert children, "the demo started no process"
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=60) == 130
        assert _live_pids(children) == []
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
        demo.stdout.close()
        shutil.rmtree(ROOT / ".demo-logs" / namespace, ignore_errors=True)  # interrupted: kept


def _children_of(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]
