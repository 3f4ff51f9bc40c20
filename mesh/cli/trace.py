"""`mesh trace TRACE_ID`: where a request went, hop by hop, with timings.

Reads what the observer stored for the trace (`mesh.observer.store`) and the records of
its tasks (state history, stored Result); when no observer stored it, the task records
alone, found by a bounded scan of the namespace's tasks. Readable tree by default,
``--json`` for scripts. Exit 1 when the trace is unknown.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import Any

from pydantic import TypeAdapter, ValidationError

from mesh.cli._args import UsageError
from mesh.config import Settings
from mesh.connection import connect
from mesh.dispatch.store import TaskStore
from mesh.observer.store import TraceStore, task_records, trace_tasks
from mesh.observer.tree import Hop, Trace, build_trace, parent_left_ms
from mesh.schemas.codec import dumps
from mesh.schemas.envelope import Identifier

_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)
#: timings shown on a hop's line, in this order
_TIMINGS = (("route_ms", "route"), ("queue_ms", "queue"), ("handler_ms", "handler"))


def register(sub: Any) -> None:
    p = sub.add_parser(
        "trace",
        help="show the hops of a request: agents, routing, timings per state, handoffs",
        description="The tree of a trace's hops, from what `mesh observer` stored (or the "
        "task records). Examples: mesh trace 6f1c...; mesh trace 6f1c... --json",
    )
    p.add_argument("trace_id", help="the trace id (a Result's trace_id, `mesh events`)")
    p.add_argument("--json", action="store_true", help="print the tree as JSON")
    p.set_defaults(func=_trace)


def _trace(args: argparse.Namespace, settings: Settings) -> int:
    try:
        trace_id = _IDENTIFIER.validate_python(args.trace_id)
    except ValidationError:
        raise UsageError(
            f"trace_id {args.trace_id!r} is not an id (1..128 of A-Z a-z 0-9 _ . : @ -)"
        ) from None
    trace = asyncio.run(load_trace(settings, trace_id))
    if not trace.roots:
        print(
            f"mesh trace: no trace {trace_id} in namespace {settings.namespace} (unknown, or "
            f"older than {settings.observer_trace_ttl_s} s; is `mesh observer` running?)",
            file=sys.stderr,
        )
        return 1
    print(dumps(trace.as_dict()).decode() if args.json else render(trace))
    return 0


async def load_trace(settings: Settings, trace_id: str) -> Trace:
    """The trace as stored by the observer, else as the task records tell it."""
    async with await connect(settings, name="mesh-trace") as conn:
        events = await TraceStore(conn.redis, conn.keys, settings).events(trace_id)
        task_ids = list(dict.fromkeys(e.task_id for e in events if e.task_id))
        source, complete = "observer", True
        if not task_ids:
            task_ids, complete = await trace_tasks(conn.redis, conn.keys, trace_id)
            source = "task records"
        records = await task_records(TaskStore(conn.redis, conn.keys, settings), task_ids)
    return build_trace(trace_id, events, records, source=source, complete=complete)


def _clock(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]


def _ms(value: float | int | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f} ms" if isinstance(value, float) and value < 100 else f"{value:.0f} ms"


def render(trace: Trace) -> str:
    """The readable tree: one block per hop, handoffs indented under their parent."""
    hops = trace.hops()
    starts = [h.start_ms for h in hops if h.start_ms is not None]
    origin = min(starts) if starts else 0
    lines = [
        f"trace {trace.trace_id}: {len(hops)} task(s), {len(trace.roots)} root(s) "
        f"(from {trace.source}{'' if trace.complete else ', partial: scan limit reached'})"
    ]
    for root in trace.roots:
        _render_hop(root, None, "", lines, origin)
    return "\n".join(lines)


def _render_hop(hop: Hop, parent: Hop | None, indent: str, lines: list[str], origin: int) -> None:
    head = "handoff " if parent is not None else ""
    score = f"{hop.score:.3f}" if isinstance(hop.score, float) else "-"
    low = " low-confidence" if hop.low_confidence else ""
    lines.append(
        f"{indent}- {head}task {hop.task_id}  agent={hop.agent_id or '-'}  "
        f"instance={hop.instance_id or '-'}  strategy={hop.strategy or '-'}  score={score}{low}  "
        f"status={hop.status or 'in progress'}" + (f" ({hop.error})" if hop.error else "")
    )
    pad = indent + "    "
    if hop.capability:
        lines.append(f"{pad}capability: {hop.capability[:100]}")
    timings = [f"{label} {_ms(hop.timings[key])}" for key, label in _TIMINGS if key in hop.timings]
    if "total_ms" in hop.timings:
        timings.append(f"total {_ms(hop.timings['total_ms'])}")
    if timings:
        lines.append(f"{pad}timings: {', '.join(timings)}")
    if hop.deadline_ms is not None:
        left = parent_left_ms(parent, hop)
        text = f"{pad}deadline {_clock(hop.deadline_ms)} (budget {_ms(hop.budget_ms)}"
        if left is not None:
            text += f"; parent had {_ms(left)} left, half is {_ms(left // 2)}"
        lines.append(text + ")")
    if hop.rerouted_from:
        lines.append(f"{pad}rerouted away from: {', '.join(hop.rerouted_from)}")
    steps = hop.steps
    for i, step in enumerate(steps):
        spent = steps[i + 1].ts_ms - step.ts_ms if i + 1 < len(steps) else None
        took = f"  ({spent} ms)" if spent is not None else ""
        by = f"  by {step.by}" if step.by else ""
        note = f"  [{step.note}]" if step.note else ""
        lines.append(
            f"{pad}{_clock(step.ts_ms)}  +{step.ts_ms - origin:>6} ms  {step.state:<11}{took}"
            f"{by}{note}"
        )
    for child in hop.children:
        _render_hop(child, hop, pad, lines, origin)


__all__ = ["load_trace", "render"]
