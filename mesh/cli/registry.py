"""`mesh registry`: run the registry service (leases, fencing tokens, agent events)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from mesh.cli._runner import run_serve
from mesh.cli.health import add_check_flag, probe
from mesh.cli.run import with_metrics
from mesh.config import Settings
from mesh.connection import MeshConnection


def register(sub: Any) -> None:
    p = sub.add_parser(
        "registry",
        help="run a registry (consumer of the registry queue; run several for availability)",
    )
    add_check_flag(p, "registry")
    p.set_defaults(func=_registry)


def _registry(args: argparse.Namespace, settings: Settings) -> int:
    if args.check:
        return probe(settings, "registry", [])
    from mesh.services import start_registry

    async def starter(conn: MeshConnection) -> Callable[[], Awaitable[None]]:
        return await with_metrics(settings, "registry", lambda m: start_registry(conn, metrics=m))

    return run_serve(settings, "mesh-registry", starter)
