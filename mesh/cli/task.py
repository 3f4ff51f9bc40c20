"""`mesh task TASK_ID`: a task's current state, its state history with times, its Result."""

from __future__ import annotations

import argparse
import asyncio
from datetime import UTC, datetime
from typing import Any

from mesh.config import Settings
from mesh.connection import connect
from mesh.dispatch.store import TaskStore
from mesh.schemas.codec import dumps


def register(sub: Any) -> None:
    p = sub.add_parser("task", help="show a task's state history (times, who moved it)")
    p.add_argument("task_id", help="the task's id (from its Result or `mesh request`)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(func=_run)


def render(
    task_id: str,
    state: dict[str, str],
    history: list[dict[str, Any]],
    result: dict[str, Any] | None,
) -> str:
    """The human view: one line per transition, time since the first, then the Result."""
    if not state:
        return f"task {task_id}: unknown (never seen, or older than idempotency_ttl_s)"
    lines = [
        f"task {task_id}  state={state.get('state')}  trace={state.get('trace_id', '-')}  "
        f"agent={state.get('agent_id', '-')}"
    ]
    start = history[0]["ts_ms"] if history else 0
    for entry in history:
        at = datetime.fromtimestamp(entry["ts_ms"] / 1000, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
        note = f"  ({entry['note']})" if entry.get("note") else ""
        lines.append(
            f"  {at}  +{entry['ts_ms'] - start:>7} ms  {entry['state']:<11} by {entry['by']}{note}"
        )
    if result is not None:
        error = result.get("error") or {}
        lines.append(
            f"result: {result['status']}"
            + (f"  {error.get('code')}: {error.get('message')}" if error else "")
        )
    return "\n".join(lines)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    async def go() -> int:
        async with await connect(settings, name="mesh-task") as conn:
            store = TaskStore(conn.redis, conn.keys, settings)
            state = await store.state(args.task_id)
            history = await store.history(args.task_id)
            stored = await store.stored_result(args.task_id)
        result = stored.model_dump(mode="json") if stored else None
        if args.json:
            record = {"task_id": args.task_id, **state, "history": history, "result": result}
            print(dumps(record).decode())
        else:
            print(render(args.task_id, state, history, result))
        return 0 if state else 1

    return asyncio.run(go())
