"""Logging: MESH_LOG_FORMAT=json writes one object per line with the task's ids."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mesh.logs import JsonFormatter, configure

ROOT = Path(__file__).resolve().parents[2]


def test_a_json_line_carries_the_ids_a_message_names() -> None:
    record = logging.LogRecord(
        "mesh.worker.settle",
        logging.WARNING,
        __file__,
        1,
        "task_id=%s: result refused (stale token); handed back",
        ("t-42",),
        None,
    )
    entry = json.loads(JsonFormatter().format(record))
    assert entry["level"] == "WARNING" and entry["logger"] == "mesh.worker.settle"
    assert entry["task_id"] == "t-42" and "handed back" in entry["message"]
    assert entry["ts"].endswith("+00:00")


def test_the_level_comes_from_the_setting_or_the_verbosity() -> None:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        configure("INFO", "json", 0)
        assert root.level == logging.INFO
        assert isinstance(root.handlers[0].formatter, JsonFormatter)
        configure(None, "text", 2)
        assert root.level == logging.DEBUG
        configure(None, "text", 0)
        assert logging.getLogger("aiormq.connection").level == logging.CRITICAL
    finally:
        root.setLevel(saved[0])
        root.handlers[:] = saved[1]


@pytest.mark.parametrize("value", ["loud"])
def test_a_bad_log_level_is_one_line(value: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mesh.cli.main", "agents"],
        cwd=tmp_path,
        env={**os.environ, "MESH_LOG_LEVEL": value, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("mesh: ") and "MESH_LOG_LEVEL" in done.stderr
