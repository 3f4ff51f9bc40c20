"""`mesh schemas export [--out DIR] [--check]`: JSON Schemas of the wire contracts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mesh.cli._args import UsageError
from mesh.config import Settings
from mesh.schemas.export import bundle, render, write


def register(sub: Any) -> None:
    p = sub.add_parser("schemas", help="export the JSON Schemas of the wire contracts")
    ssub = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="export")
    e = ssub.add_parser(
        "export",
        help="print the JSON Schemas as one JSON object, or write DIR/*.schema.json",
    )
    e.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="write one NAME.schema.json per model into DIR (default: one object on stdout)",
    )
    e.add_argument("--check", action="store_true", help="exit 1 if the files in --out differ")
    e.set_defaults(func=_export)


def _export(args: argparse.Namespace, settings: Settings) -> int:
    out: Path | None = args.out
    if out is None:
        if args.check:
            raise UsageError("`mesh schemas export --check` needs --out DIR: the files to compare")
        sys.stdout.buffer.write(bundle())
        return 0
    if args.check:
        stale = [
            name
            for name, data in render().items()
            if not (out / name).exists() or (out / name).read_bytes() != data
        ]
        if stale:
            print(
                f"out of date: {', '.join(stale)}; run `mesh schemas export --out {out}`",
                file=sys.stderr,
            )
            return 1
        return 0
    for path in write(out):
        print(f"wrote {path}", file=sys.stderr)
    return 0
