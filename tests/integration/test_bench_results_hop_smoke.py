"""`bench/results_hop.py` runs end to end at a tiny size: raw, raw+hop, mesh and mesh with
access control (a provisioned vhost, removed afterwards) each complete their tasks."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_a_tiny_run_prints_every_mode_and_the_ratios() -> None:
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "bench/results_hop.py",
            "-r",
            "1",
            "--tasks",
            "60",
            "--concurrency",
            "8",
            "--rate",
            "20",
            "--seconds",
            "1",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for mode in ("raw ", "raw+hop", "mesh ", "mesh+ac"):
        assert f"run 1/1 {mode}" in done.stdout
    assert "mesh+ac/raw+hop" in done.stdout


def test_the_metrics_modes_run_alternating_and_print_their_ratio() -> None:
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "bench/results_hop.py",
            *("-r", "1", "--tasks", "60", "--concurrency", "8", "--rate", "20", "--seconds", "1"),
            *("--modes", "mesh,mesh+m"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "run 1/1 mesh+m" in done.stdout and "run 1/1 raw" not in done.stdout
    assert "mesh+m/mesh (metrics)" in done.stdout
