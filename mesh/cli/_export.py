"""Writing (or checking) a generated document: to stdout, or to the path given.

`mesh schemas export`, `mesh topology export` and `mesh asyncapi` share it. A document
describes the configured namespace (MESH_NAMESPACE) and is never written into the
installed package: without ``--out`` it goes to stdout; ``--check`` compares it with the
file given by ``--out`` and exits 1 naming the command that rewrites it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from mesh.cli._args import UsageError
from mesh.config import Settings


def add_out_arguments(parser: argparse.ArgumentParser, *, what: str, example: str) -> None:
    """The ``--out`` and ``--check`` options every export command takes."""
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"write {what} to PATH (default: stdout), e.g. --out {example}",
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file given by --out differs"
    )


def write_or_check(
    args: argparse.Namespace,
    settings: Settings,
    render: Callable[[Settings], bytes],
    *,
    command: str,
) -> int:
    """Write ``render(settings)`` to ``args.out`` (stdout without it), or ``--check`` it."""
    out: Path | None = args.out
    if args.check and out is None:
        raise UsageError(f"`{command} --check` needs --out PATH: the file to compare")
    data = render(settings)
    if out is None:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        return 0
    if args.check:
        current = out.read_bytes() if out.exists() else b""
        if current != data:
            print(f"{out} is out of date: run `{command} --out {out}`", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    print(f"wrote {out}", file=sys.stderr)
    return 0


__all__ = ["add_out_arguments", "write_or_check"]
