"""`bench/load.py --tiny --metrics on,off`: one mesh with /metrics, one without, in one run;
the routers' endpoints were really on (they counted the dispatches) and the cost is printed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_load_run_with_metrics_on_and_off(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "bench/load.py",
            "--tiny",
            "--skip-raw",
            "--modes",
            "target",
            "--metrics",
            "on,off",
            "--results-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
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
