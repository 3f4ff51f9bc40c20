"""`bench/faults.py --quick` runs end to end for kill30 and redis-restart and writes its JSON.

redis-restart runs the mesh on a throw-away redis-server of its own (never the shared one);
broker-restart is never run by a test (it stops the machine's RabbitMQ).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

FIELDS = (
    "submitted",
    "accepted",
    "lost",
    "doubled_results",
    "conflicting_results",
    "effect_twice",
    "completed_effect_never",
    "effect_not_completed",
    "success_rate",
    "on_time_rate",
    "recovery_s",
    "latency_ms",
    "spurious_downs",
)


def run_quick(scenario: str, results: Path) -> dict[str, Any]:
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "bench/faults.py",
            scenario,
            "--quick",
            "--results-dir",
            str(results),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "median" in done.stdout
    paths = list(results.glob(f"faults-{scenario}*.json"))
    assert len(paths) == 1, paths
    doc: dict[str, Any] = json.loads(paths[0].read_text())
    assert doc["scenario"] == scenario and doc["definitions"]
    assert len(doc["runs"]) == 1
    return doc


def test_quick_kill30_loses_nothing_and_counts_every_figure(tmp_path: Path) -> None:
    doc = run_quick("kill30", tmp_path)
    run = doc["runs"][0]
    metrics = run["metrics"]
    for name in (*FIELDS, "killed_instances", "lease_down_s", "dead_work_s", "restart_up_s"):
        assert name in metrics, name
    assert metrics["submitted"] == metrics["accepted"] > 0
    assert metrics["lost"] == 0
    assert metrics["killed_instances"] == 1
    assert metrics["lease_down_s"]["missing"] == 0
    assert [f["action"] for f in run["faults"]] == ["kill-instances", "restart-instances"]
    assert sum(row["submitted"] for row in run["timeline"]) == metrics["submitted"]
    assert run["statuses"].get("completed", 0) > 0
    assert not run["unexpected_exits"]
    assert doc["summary"]["lost"]["median"] == 0


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_quick_redis_restart_runs_on_a_private_redis(tmp_path: Path) -> None:
    doc = run_quick("redis-restart", tmp_path)
    run = doc["runs"][0]
    for name in FIELDS:
        assert name in run["metrics"], name
    assert [f["action"] for f in run["faults"]] == ["redis-kill", "redis-started"]
    assert run["metrics"]["submitted"] > 0
    # today's mesh may lose tasks or double effects across an empty restart: the bench
    # counts them; every submitted task is accounted for exactly once
    accounted = sum(run["statuses"].values())
    assert accounted == run["metrics"]["submitted"]
