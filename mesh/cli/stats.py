"""`mesh stats`: live per-agent figures (from a running observer) and queue depths.

The figures are the ones `mesh observer` keeps and stores every second
(`Keys.observer_figures`); the queue depths and consumers come from the management API.
The view refreshes in place every ``--interval`` seconds until Ctrl-C; ``--once`` prints it
once (``--json`` too) for scripts and tests. Without a running observer the queues are
still shown, with a line saying how to start one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from typing import Any

from mesh.access.roles import vhost_of
from mesh.cli._args import UsageError, positive_float
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.management import Management
from mesh.schemas import now_ms
from mesh.schemas.codec import dumps, loads

#: clear the terminal and go home (the view is redrawn in place)
_REDRAW = "\x1b[H\x1b[2J"


def register(sub: Any) -> None:
    p = sub.add_parser(
        "stats",
        help="live per-agent figures (tasks, success, latency, breakers) and queue depths",
        description="Figures from a running `mesh observer`, and the namespace's queues. "
        "Examples: mesh stats; mesh stats --once --json",
    )
    p.add_argument("--once", action="store_true", help="print once and exit (for scripts)")
    p.add_argument("--json", action="store_true", help="with --once: print the view as JSON")
    p.add_argument(
        "--interval",
        type=positive_float,
        default=2.0,
        metavar="S",
        help="seconds between refreshes (default 2)",
    )
    p.add_argument(
        "--observer",
        default=None,
        metavar="NAME",
        help="the observer whose figures to show (default MESH_OBSERVER_NAME, 'main')",
    )
    p.set_defaults(func=_stats)


def _stats(args: argparse.Namespace, settings: Settings) -> int:
    if args.json and not args.once:
        raise UsageError("--json needs --once (the live view is text)")
    name = args.observer or settings.observer_name

    async def go() -> int:
        management = Management(settings, vhost_of(settings))
        async with await connect(settings, name="mesh-stats") as conn:
            if args.once:
                view = await gather(conn, management, name)
                print(dumps(view).decode() if args.json else render(view))
                return 0
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)
            while not stop.is_set():
                view = await gather(conn, management, name)
                print(_REDRAW + render(view), flush=True)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=args.interval)
            print(file=sys.stderr)
            return 0

    return asyncio.run(go())


async def gather(conn: MeshConnection, management: Management, name: str) -> dict[str, Any]:
    """The view's data: the observer's stored figures (None: none running) and queues."""
    raw = await conn.redis.get(conn.keys.observer_figures(name))
    figures = loads(raw) if raw else None
    rows = await asyncio.to_thread(management.queues)
    prefix = f"{conn.settings.namespace}."
    queues = [
        {
            "name": r["name"],
            "messages": int(r.get("messages", 0) or 0),
            "unacked": int(r.get("messages_unacknowledged", 0) or 0),
            "consumers": int(r.get("consumers", 0) or 0),
        }
        for r in sorted(rows, key=lambda r: str(r.get("name")))
        if str(r.get("name", "")).startswith(prefix)
    ]
    return {
        "namespace": conn.settings.namespace,
        "observer": name,
        "ts_ms": now_ms(),
        "figures": figures,
        "queues": queues,
    }


def _pct(value: float | None) -> str:
    return f"{value:.0%}" if value is not None else "-"


def _num(value: float | None) -> str:
    return f"{value:.0f}" if value is not None else "-"


def render(view: dict[str, Any]) -> str:
    """The view as text: a header, one row per agent, one row per queue, the alerts."""
    lines = [f"namespace {view['namespace']}"]
    figures = view.get("figures")
    if figures is None:
        lines.append(
            f"no figures: no observer named {view['observer']!r} runs in this namespace "
            "(start one with `mesh observer`)"
        )
    else:
        age = max(0, view["ts_ms"] - figures["ts_ms"]) / 1000
        lines.append(
            f"observer {figures['name']} ({figures['observer_id']}): {figures['events']} events, "
            f"{figures['decisions']} decisions, {figures['no_match']} without a match, "
            f"{figures['unroutable']} unroutable (as of {age:.0f} s ago)"
        )
        header = ("agent", "done", "failed", "success", "p50 ms", "p90 ms", "p99 ms")
        rows: list[tuple[str, ...]] = [(*header, "reroutes", "bids won", "breaker")]
        for agent_id, a in figures["agents"].items():
            tasks = a["tasks"]
            failed = sum(n for status, n in tasks.items() if status != "completed")
            lat = a["latency_ms"]
            rows.append(
                (
                    str(agent_id),
                    str(tasks.get("completed", 0)),
                    str(failed),
                    _pct(a["success_rate"]),
                    _num(lat["p50"]),
                    _num(lat["p90"]),
                    _num(lat["p99"]),
                    str(a["reroutes"]),
                    str(a["bids_won"]),
                    str(a["breaker"]),
                )
            )
        lines += _table(rows) if len(rows) > 1 else ["(no agent seen yet)"]
    lines.append("")
    queue_rows: list[tuple[str, ...]] = [("queue", "messages", "unacked", "consumers")]
    queue_rows += [
        (q["name"], str(q["messages"]), str(q["unacked"]), str(q["consumers"]))
        for q in view["queues"]
    ]
    lines += _table(queue_rows) if len(queue_rows) > 1 else ["(no queue in this namespace)"]
    alerts = figures.get("alerts", []) if figures else []
    if alerts:
        lines.append("")
        lines += [f"ALERT {a['alert']}: {a['message']}" for a in alerts]
    return "\n".join(lines)


def _table(rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    ]


__all__ = ["gather", "render"]
