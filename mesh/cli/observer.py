"""`mesh observer`: follow the events exchange; keep traces, logs, figures and alerts.

One line when it starts (namespace, observer id, queue, log folder) and one when it stops
(events seen, alerts raised); Ctrl-C (or SIGTERM) stops it cleanly. Settings:
``MESH_OBSERVER_*`` (README "Operating it").
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from mesh.cli._args import UsageError
from mesh.cli._runner import run_serve
from mesh.cli.run import with_metrics
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.metrics import Metrics
from mesh.observer import Observer

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "observer",
        help="run an observer: per-trace history, decision log, per-agent figures, alerts",
        description="Follow every event of the namespace. Examples: mesh observer; "
        "mesh observer --name ops --log-dir /var/log/agent-reach",
    )
    p.add_argument(
        "--name",
        default=None,
        help="observer name: each name has its own queue and sees every event "
        "(default MESH_OBSERVER_NAME, 'main')",
    )
    p.add_argument(
        "--log-dir",
        default=None,
        metavar="DIR",
        help="folder of the JSON-lines logs (default MESH_OBSERVER_LOG_DIR)",
    )
    p.set_defaults(func=_observer)


def _observer(args: argparse.Namespace, settings: Settings) -> int:
    update: dict[str, Any] = {}
    if args.name is not None:
        if not _NAME.match(args.name):
            raise UsageError(f"--name must be 1..64 of A-Z a-z 0-9 _ -, got {args.name!r}")
        update["observer_name"] = args.name
    if args.log_dir is not None:
        update["observer_log_dir"] = Path(args.log_dir)
    settings = settings.model_copy(update=update) if update else settings

    async def starter(conn: MeshConnection) -> Callable[[], Awaitable[None]]:
        return await with_metrics(settings, "observer", lambda m: _start(conn, settings, m))

    return run_serve(settings, "mesh-observer", starter)


async def _start(
    conn: MeshConnection, settings: Settings, metrics: Metrics | None
) -> Callable[[], Awaitable[None]]:
    observer = Observer(conn, metrics=metrics)
    await observer.start()
    print(
        f"observer {observer.observer_id} started (namespace {settings.namespace}, name "
        f"{settings.observer_name}): consuming {observer.queue_name}, logs in "
        f"{settings.observer_log_dir}",
        flush=True,
    )

    async def stop() -> None:
        await observer.close()
        print(
            f"observer {observer.observer_id} stopped (namespace {settings.namespace}): "
            f"{observer.events} events, {observer.rules.book.raised} alert(s) raised",
            flush=True,
        )

    return stop
