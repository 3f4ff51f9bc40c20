"""`mesh schemas export [--check]`: JSON Schemas of the wire contracts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mesh.config import Settings
from schemas.export import JSON_DIR, render, write


def register(sub: Any) -> None:
    p = sub.add_parser("schemas", help="export the JSON Schemas of the wire contracts")
    ssub = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="export")
    e = ssub.add_parser("export", help="write schemas/json/*.schema.json")
    e.add_argument(
        "--out", type=Path, default=JSON_DIR, help=f"target directory (default {JSON_DIR})"
    )
    e.add_argument("--check", action="store_true", help="exit 1 if the files differ")
    e.set_defaults(func=_export)


def _export(args: argparse.Namespace, settings: Settings) -> int:
    if args.check:
        stale = [
            name
            for name, data in render().items()
            if not (args.out / name).exists() or (args.out / name).read_bytes() != data
        ]
        if stale:
            print(f"out of date: {', '.join(stale)}; run `mesh schemas export`", file=sys.stderr)
            return 1
        return 0
    for path in write(args.out):
        print(f"wrote {path}")
    return 0
