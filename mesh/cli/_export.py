"""Writing (or checking) a generated file that is committed for the default namespace.

`mesh topology export` and `mesh asyncapi` share it: without ``--out`` the file always
describes the default namespace (another MESH_NAMESPACE is named and replaced, so it can
neither overwrite the committed file nor make ``--check`` ask for a rewrite); ``--check``
exits 1 naming the command that rewrites it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from mesh.config import Settings

#: the namespace of the committed generated files
DEFAULT_NAMESPACE: str = Settings.model_fields["namespace"].default


def write_or_check(
    args: argparse.Namespace,
    settings: Settings,
    render: Callable[[Settings], bytes],
    *,
    default_path: Path,
    shown: str,
    command: str,
) -> int:
    """Write ``render(settings)`` to ``args.out`` (or `default_path`), or ``--check`` it."""
    out: Path = args.out or default_path
    name = str(out) if args.out is not None else shown
    if args.out is None and settings.namespace != DEFAULT_NAMESPACE:
        print(
            f"mesh: {shown} holds namespace {DEFAULT_NAMESPACE!r}, not "
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
            print(f"{name} is out of date: run `{command}{again}`", file=sys.stderr)
            return 1
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    print(f"wrote {name}")
    return 0


__all__ = ["DEFAULT_NAMESPACE", "write_or_check"]
