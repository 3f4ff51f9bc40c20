"""`mesh worker --reload`: a missing watchfiles is one line naming the extra; the watcher
runs the same worker command without ``--reload``."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

import pytest

from mesh.cli import reload
from mesh.cli.main import build_parser, main


def test_without_watchfiles_reload_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    real = importlib.import_module

    def no_watchfiles(name: str, package: str | None = None) -> ModuleType:
        if name == "watchfiles":
            raise ImportError("No module named 'watchfiles'")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", no_watchfiles)
    code = main(["worker", "app:agent", "--reload", "--app-dir", str(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines == [
        "mesh: mesh worker --reload watches files with watchfiles, which is not installed: "
        "pip install 'agent-reach-mesh[reload]'"
    ]


def test_the_child_is_the_same_worker_without_reload(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        [
            "-v",
            "worker",
            "shop:refunds",
            "shop:logistics",
            "--reload",
            "--app-dir",
            str(tmp_path),
            "--grace-s",
            "3",
            "--concurrency",
            "4",
        ]
    )
    command = reload.child_command(args)
    assert command[:3] == [sys.executable, "-m", "mesh.cli.main"]
    assert "--reload" not in command
    child = build_parser().parse_args(command[3:])
    assert (child.agents, child.grace_s, child.concurrency, child.verbose) == (
        ["shop:refunds", "shop:logistics"],
        3.0,
        4,
        1,
    )
    assert Path(child.app_dir) == tmp_path.resolve() and child.reload is False
