"""`mesh asyncapi [--out PATH] [--check]`: the AsyncAPI 3.0 document of the topology."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from mesh.asyncapi import render
from mesh.cli._export import DEFAULT_NAMESPACE, write_or_check
from mesh.config import Settings
from schemas.export import JSON_DIR

#: the committed document, beside `schemas/json/`
DEFAULT_PATH = JSON_DIR.parent / "asyncapi.json"
#: how the default path is shown
SHOWN_PATH = "schemas/asyncapi.json"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "asyncapi",
        help="write the AsyncAPI 3.0 document of the topology and the message schemas",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"target file (default {SHOWN_PATH}, which always holds namespace "
        f"{DEFAULT_NAMESPACE!r})",
    )
    p.add_argument("--check", action="store_true", help="exit 1 if the file differs")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    return write_or_check(
        args, settings, render, default_path=DEFAULT_PATH, shown=SHOWN_PATH, command="mesh asyncapi"
    )
