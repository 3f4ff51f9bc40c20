"""Lifecycle events on `mesh.events` (`task.*`, `agent.*`, `alert.*`), one or a batch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from mesh.schemas._base import WireModel, now_ms

#: most events one `EventBatch` may carry (`Settings.event_batch_max_events` is at most this)
MAX_BATCH_EVENTS = 1000


class Event(WireModel):
    """Something that happened; the routing key is `type`."""

    type: str = Field(min_length=1, max_length=128, pattern=r"^(task|agent|alert|route)\.[a-z_.]+$")
    ts_ms: int = Field(default_factory=now_ms, ge=0)
    trace_id: str | None = Field(default=None, max_length=128)
    task_id: str | None = Field(default=None, max_length=128)
    agent_id: str | None = Field(default=None, max_length=128)
    instance_id: str | None = Field(default=None, max_length=128)
    data: dict[str, Any] = Field(default_factory=dict)


class EventBatch(WireModel):
    """Events of one routing key that travelled together, oldest first: the body of an
    events message with the ``x-mesh-batch`` header (its value: how many)."""

    events: list[Event] = Field(min_length=1, max_length=MAX_BATCH_EVENTS)


def batch_body(events: Sequence[bytes]) -> bytes:
    """The `EventBatch` body of events already encoded (each one `Event`'s JSON)."""
    return b'{"events":[' + b",".join(events) + b"]}"


__all__ = ["MAX_BATCH_EVENTS", "Event", "EventBatch", "batch_body"]
