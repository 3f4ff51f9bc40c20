"""Per-trace history in Redis: what the observer writes and `mesh trace` reads.

A trace is a sorted set (`Keys.trace`) of the events' bytes exactly as they travelled,
scored by their ``ts_ms``: a second observer storing the same event stores nothing new,
and the set is capped at `Settings.observer_trace_max_events` (the oldest go) and expires
`Settings.observer_trace_ttl_s` after its last event.

`trace_tasks` is the fallback of `mesh trace` when no observer stored the trace: the task
records (`mesh.dispatch.store`) name their trace, so a bounded SCAN of them finds its tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mesh.dispatch.store import TaskStore
from mesh.keys import Keys
from mesh.schemas import Event, InvalidEnvelope, decode

logger = logging.getLogger(__name__)

#: task records `trace_tasks` looks at, at most (its cost is one SCAN step per 500)
SCAN_LIMIT = 50_000
_SCAN_COUNT = 500


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """What Redis holds about one task: its hash, its transitions, its stored Result."""

    task_id: str
    state: dict[str, str]
    history: list[dict[str, Any]]
    result: dict[str, Any] | None


class TraceStore:
    def __init__(self, redis: Any, keys: Keys, settings: Any) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_ms = int(settings.observer_trace_ttl_s * 1000)
        self.max_events = settings.observer_trace_max_events

    async def add(self, events: Iterable[tuple[Event, bytes]]) -> None:
        """Store events (with their raw bytes) under their traces, in one round trip."""
        pipe = self.redis.pipeline(transaction=False)
        queued = False
        for event, raw in events:
            if not event.trace_id:
                continue
            key = self.keys.trace(event.trace_id)
            pipe.zadd(key, {raw: event.ts_ms})
            pipe.zremrangebyrank(key, 0, -self.max_events - 1)
            pipe.pexpire(key, self.ttl_ms)
            queued = True
        if queued:
            await pipe.execute()

    async def events(self, trace_id: str) -> list[Event]:
        """The stored events of a trace, oldest first (unreadable ones skipped)."""
        found = []
        for raw in await self.redis.zrange(self.keys.trace(trace_id), 0, -1):
            try:
                found.append(decode(Event, raw))
            except InvalidEnvelope:
                logger.warning("an unreadable event in trace %s was skipped", trace_id)
        return found


async def trace_tasks(
    redis: Any, keys: Keys, trace_id: str, limit: int = SCAN_LIMIT
) -> tuple[list[str], bool]:
    """Task ids whose record names `trace_id`, and whether the whole namespace was read
    (False: `limit` records were looked at first)."""
    pattern = keys.task("*")
    found: list[str] = []
    seen = 0
    prefix = keys.task("")
    cursor: Any = 0
    while True:
        cursor, batch = await redis.scan(cursor, match=pattern, count=_SCAN_COUNT)
        if batch:
            pipe = redis.pipeline(transaction=False)
            for key in batch:
                pipe.hget(key, "trace_id")
            for key, value in zip(batch, await pipe.execute(), strict=True):
                if value is not None and _text(value) == trace_id:
                    found.append(_text(key)[len(prefix) :])
            seen += len(batch)
        if not cursor:
            return found, True
        if seen >= limit:
            return found, False


async def task_records(store: TaskStore, task_ids: Iterable[str]) -> dict[str, TaskRecord]:
    """The Redis records of `task_ids` (a task whose record expired has empty fields)."""
    records = {}
    for task_id in task_ids:
        result = await store.stored_result(task_id)
        records[task_id] = TaskRecord(
            task_id,
            await store.state(task_id),
            await store.history(task_id),
            result.model_dump(mode="json") if result is not None else None,
        )
    return records


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


__all__ = ["SCAN_LIMIT", "TaskRecord", "TraceStore", "task_records", "trace_tasks"]
