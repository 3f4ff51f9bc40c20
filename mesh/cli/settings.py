"""`mesh settings [--markdown] [--readme FILE [--check]]`: every MESH_* variable and default."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from mesh import settings_table
from mesh.cli._args import UsageError
from mesh.config import Settings


def register(sub: Any) -> None:
    p = sub.add_parser("settings", help="list every MESH_* variable with its default and meaning")
    p.add_argument(
        "--markdown", action="store_true", help="a Markdown table (default: a .env template)"
    )
    p.add_argument(
        "--readme",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"write the Markdown table into FILE between {settings_table.BEGIN} and "
        f"{settings_table.END}",
    )
    p.add_argument(
        "--check", action="store_true", help="exit 1 if the table in --readme FILE differs"
    )
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    readme: Path | None = args.readme
    if readme is None:
        if args.check:
            raise UsageError("`mesh settings --check` needs --readme FILE: the file to compare")
        sys.stdout.write(settings_table.markdown() if args.markdown else settings_table.dotenv())
        return 0
    current = readme.read_text(encoding="utf-8")
    try:
        updated = settings_table.splice(current, settings_table.markdown())
    except ValueError as exc:
        raise UsageError(f"--readme {readme}: {exc}") from None
    if args.check:
        if updated != current:
            print(
                f"{readme} is out of date: run `mesh settings --readme {readme}`", file=sys.stderr
            )
            return 1
        return 0
    readme.write_text(updated, encoding="utf-8")
    print(f"wrote the settings table into {readme}", file=sys.stderr)
    return 0
