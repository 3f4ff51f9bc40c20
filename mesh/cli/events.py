"""`mesh events`: a live tail of the events exchange (decisions, task states, agents, alerts).

It binds an exclusive, auto-delete queue of its own (`Topology.events_queue`:
``<ns>.observer.<user>.events-<id>``, an observer queue of its AMQP user's) to
``<ns>.events`` with each ``--filter`` pattern (AMQP topic patterns: ``task.*``,
``route.decision``, ``#``) and prints one line per event (the events of a batch one by
one, `mesh.wire.each_event`) until Ctrl-C, or until ``--count`` events were printed: its
local time (ISO 8601, milliseconds, UTC offset), its type, for an alert whether it is
raised or cleared and its subject, the task and agent, and the telling parts of its data.
``--json`` prints each event as it was encoded.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from datetime import datetime
from typing import Any

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.cli._args import int_range
from mesh.config import Settings
from mesh.connection import connect
from mesh.messaging import login_of
from mesh.schemas import Event, InvalidEnvelope, encode, new_id
from mesh.topology import event_type_bindings
from mesh.wire import NoAck, Subscriber, each_event

#: what a line shows of an event's data (the rest: --json)
_SHOWN = (
    "code",
    "error",
    "route",
    "from_agent",
    "reason",
    "attempt",
    "delay_ms",
    "requested_delay_ms",
    "queue",
    "dropped",
    "visits",
)
#: what an alert's line shows first: is it raised or cleared, and about what
_ALERT_SHOWN = ("state", "subject")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "events",
        help="follow the events exchange live (route decisions, task states, agents, alerts)",
        description="Print the mesh's events as they happen. Examples: mesh events; "
        "mesh events --filter 'route.decision' --filter 'alert.*'; mesh events --json",
    )
    p.add_argument(
        "--filter",
        action="append",
        default=[],
        metavar="PATTERN",
        help="topic pattern of event types to show, repeatable (default: '#', everything)",
    )
    p.add_argument("--json", action="store_true", help="one JSON event per line")
    p.add_argument(
        "--count",
        type=int_range(0),
        default=0,
        metavar="N",
        help="stop after N events (0: never)",
    )
    p.set_defaults(func=_events)


def local_time(ts_ms: int) -> str:
    """`ts_ms` as ISO 8601 local time to the millisecond, with the UTC offset."""
    return datetime.fromtimestamp(ts_ms / 1000).astimezone().isoformat(timespec="milliseconds")


def line(event: Event, user_id: str | None = None) -> str:
    """One readable line: local time, type, an alert's state and subject, task and agent,
    the telling parts of its data, an alert's message."""
    data = event.data or {}
    alert = event.type.startswith("alert.")
    parts = [local_time(event.ts_ms), event.type]
    if alert:
        parts += [f"{key}={data[key]}" for key in _ALERT_SHOWN if data.get(key) is not None]
    for name in ("task_id", "agent_id", "instance_id"):
        value = getattr(event, name, None)
        if value:
            parts.append(f"{name.removesuffix('_id')}={value}")
    route = data.get("route")
    if isinstance(route, dict):
        parts.append(f"strategy={route.get('strategy')} score={route.get('score')}")
    for key in _SHOWN:
        if key != "route" and data.get(key) is not None:
            parts.append(f"{key}={data[key]}")
    if user_id:
        parts.append(f"by={user_id}")
    if alert and data.get("message"):
        parts.append(f"- {data['message']}")
    return " ".join(parts)


def _events(args: argparse.Namespace, settings: Settings) -> int:
    patterns: list[str] = args.filter or ["#"]

    async def go() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        printed = 0
        async with await connect(settings, name="mesh-events") as conn:
            topology = conn.topology

            async def declare(channel: AbstractChannel) -> AbstractQueue:
                queue = await channel.declare_queue(
                    topology.events_queue(login_of(settings), new_id()[:8]),
                    exclusive=True,
                    auto_delete=True,
                )
                for pattern in patterns:
                    for key in event_type_bindings(pattern):
                        await queue.bind(topology.events, routing_key=key)
                return queue

            def unreadable(message: AbstractIncomingMessage, exc: InvalidEnvelope) -> None:
                print(f"(unreadable event on {message.routing_key})", flush=True)

            async def on_event(event: Event, message: AbstractIncomingMessage) -> None:
                nonlocal printed
                if args.count and printed >= args.count:
                    return  # the rest of a batch past --count
                if args.json:
                    print(encode(event).decode(), flush=True)
                else:
                    print(line(event, message.user_id), flush=True)
                printed += 1
                if args.count and printed >= args.count:
                    stop.set()

            handle = each_event(on_event, unreadable=unreadable)
            async with Subscriber(conn, declare, handle, NoAck("events"), prefetch=256):
                print(
                    f"following {topology.events} ({', '.join(patterns)}); Ctrl-C to stop",
                    file=sys.stderr,
                    flush=True,
                )
                await stop.wait()
        return 0

    return asyncio.run(go())
