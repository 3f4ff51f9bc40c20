"""Every state transition is an event: `task.<state>` on `mesh.events`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mesh.messaging import Publisher
from schemas import Event


async def emit_states(
    publisher: Publisher,
    states: Iterable[str] | None,
    *,
    task_id: str,
    trace_id: str | None,
    agent_id: str | None = None,
    instance_id: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Publish one ``task.<state>`` event per applied state (none when refused)."""
    for state in states or ():
        await publisher.emit(
            Event(
                type=f"task.{state}",
                task_id=task_id,
                trace_id=trace_id,
                agent_id=agent_id,
                instance_id=instance_id,
                data=data or {},
            )
        )


__all__ = ["emit_states"]
