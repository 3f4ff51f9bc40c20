"""Lifecycle events on `mesh.events` (`task.*`, `agent.*`, `alert.*`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from mesh.schemas._base import WireModel, now_ms


class Event(WireModel):
    """Something that happened; the routing key is `type`."""

    type: str = Field(min_length=1, max_length=128, pattern=r"^(task|agent|alert|route)\.[a-z_.]+$")
    ts_ms: int = Field(default_factory=now_ms, ge=0)
    trace_id: str | None = Field(default=None, max_length=128)
    task_id: str | None = Field(default=None, max_length=128)
    agent_id: str | None = Field(default=None, max_length=128)
    instance_id: str | None = Field(default=None, max_length=128)
    data: dict[str, Any] = Field(default_factory=dict)
