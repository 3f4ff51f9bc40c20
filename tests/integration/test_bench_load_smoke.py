"""`bench/load.py --tiny` runs end to end: the raw pipeline, then the mesh, and its JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_load_run_writes_raw_and_mesh_rows(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            "bench/load.py",
            "--tiny",
            "--results-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "closed loop" in done.stdout
    doc = json.loads((tmp_path / "load-latest.json").read_text())
    kinds = {row["kind"] for row in doc["open_loop"]}
    assert kinds == {"raw", "mesh"}
    for row in doc["open_loop"] + [run for c in doc["closed_loop"] for run in c["runs"]]:
        assert row["completed"] > 0, row
    mesh_closed = [c for c in doc["closed_loop"] if c["kind"] == "mesh"]
    assert mesh_closed and all(c["ratio_to_raw"] for c in mesh_closed)
    assert len(list(tmp_path.glob("load-*.json"))) == 2
