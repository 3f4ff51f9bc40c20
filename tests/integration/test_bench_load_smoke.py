"""`bench/load.py --tiny` runs end to end: the raw pipeline, then the mesh, and its JSON
(the per-component table of CPU, AMQP publishes and Redis commands per task; idle CPU);
with ``--metrics on,off`` one mesh with /metrics and one without in one run (the routers'
endpoints were really on: they counted the dispatches), and the cost is printed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def run_load(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``bench/load.py --tiny ARGS``, its results in `tmp_path`; it must succeed."""
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "bench/load.py",
            "--tiny",
            *args,
            "--results-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_tiny_load_run_writes_raw_and_mesh_rows(tmp_path: Path) -> None:
    done = run_load(tmp_path, "--idle-s", "1")
    assert "closed loop" in done.stdout
    assert "per component, closed loop" in done.stdout
    doc = json.loads((tmp_path / "load-latest.json").read_text())
    kinds = {row["kind"] for row in doc["open_loop"]}
    assert kinds == {"raw", "mesh"}
    for row in doc["open_loop"] + [run for c in doc["closed_loop"] for run in c["runs"]]:
        assert row["completed"] > 0, row
    mesh_closed = [c for c in doc["closed_loop"] if c["kind"] == "mesh"]
    assert mesh_closed and all(c["ratio_to_raw"] for c in mesh_closed)
    assert len(list(tmp_path.glob("load-*.json"))) == 2
    # the per-component table: every task published by the client once, the routers and
    # workers published too, Redis counted for the mesh only; each mesh process measured idle
    components = {(c["config"], c["component"]): c for c in doc["components"]}
    for config in ("raw n4 r1", "mesh n4 r1"):
        assert components[(config, "client")]["amqp_per_task"] >= 1.0
        assert components[(config, "routers")]["amqp_per_task"] >= 1.0
        assert components[(config, "workers")]["amqp_per_task"] >= 1.0
        assert components[(config, "rabbitmq")]["cpu_ms_per_task"]["median"] > 0
    assert components[("mesh n4 r1", "redis")]["redis"]["commands"] > 0
    (idle,) = doc["idle"]
    assert idle["config"] == "mesh n4 r1"
    assert {"registry", "router0", "worker0"} <= set(idle["cores"])


def test_tiny_load_run_with_metrics_on_and_off(tmp_path: Path) -> None:
    done = run_load(tmp_path, "--skip-raw", "--modes", "target", "--metrics", "on,off")
    assert "metrics cost, mesh n4 r1 target: on " in done.stdout
    doc = json.loads((tmp_path / "load-latest.json").read_text())
    configs = {c["config"] for c in doc["closed_loop"]}
    assert configs == {"mesh n4 r1 m-on", "mesh n4 r1 m-off"}
    for c in doc["closed_loop"]:
        assert c["median_per_s"] > 0, c
    # every completed task of the metrics-on mesh was dispatched once, and counted
    on_rows = [r for r in doc["open_loop"] if r["config"] == "mesh n4 r1 m-on"]
    assert doc["metrics"]["scraped_dispatches"]["mesh n4 r1 m-on"] >= on_rows[0]["completed"]
    assert doc["metrics"]["cost"]["mesh n4 r1 target"]["ratio"] > 0
