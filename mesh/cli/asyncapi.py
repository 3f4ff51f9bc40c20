"""`mesh asyncapi [--out PATH] [--check]`: the AsyncAPI 3.0 document of the topology."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mesh.asyncapi import render
from mesh.cli.topology import DEFAULT_NAMESPACE
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
    out: Path = args.out or DEFAULT_PATH
    shown = str(out) if args.out is not None else SHOWN_PATH
    if args.out is None and settings.namespace != DEFAULT_NAMESPACE:
        # the committed file is the default namespace's: another namespace must not
        # replace it (nor make --check tell the user to)
        print(
            f"mesh: {SHOWN_PATH} holds namespace {DEFAULT_NAMESPACE!r}, not "
            f"MESH_NAMESPACE={settings.namespace!r}: using {DEFAULT_NAMESPACE!r} "
            "(pass --out to export another namespace)",
            file=sys.stderr,
        )
        settings = settings.model_copy(update={"namespace": DEFAULT_NAMESPACE})
    data = render(settings)
    if args.check:
        current = out.read_bytes() if out.exists() else b""
        if current != data:
            again = "" if args.out is None else f" --out {out}"
            print(f"{shown} is out of date: run `mesh asyncapi{again}`", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    print(f"wrote {shown}")
    return 0
