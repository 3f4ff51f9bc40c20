"""Every `mesh` subcommand's module imports without numpy (it is in the `router` extra):
the CLI builds its whole parser for any command, `mesh worker` and `mesh agents` included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.no_numpy import BLOCK_NUMPY

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = (
    BLOCK_NUMPY
    + """from mesh.cli.main import build_parser
import mesh.observer

parser = build_parser()
print("commands", len(parser._subparsers._group_actions[0].choices))
"""
)


def test_the_cli_and_the_observer_import_without_numpy() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[1]) >= 20, done.stdout
