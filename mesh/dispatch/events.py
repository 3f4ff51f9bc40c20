"""State transitions as events: `task.<state>` on `mesh.events`.

Outcome events (terminal states, ``rerouting``, ``retrying``) are always published: routers
learn from them. The progress states (`PROGRESS_STATES`) are published only with
``Settings.progress_events``: every transition is in the task's history in Redis anyway
(`mesh task ID`), and five publishes per task that nothing consumes cost the broker and
every process on the path.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from mesh.messaging import Publisher
from mesh.schemas import Event
from mesh.topology import event_routing_key

#: states of a task on its normal way, before its outcome
PROGRESS_STATES = frozenset({"submitted", "routing", "dispatched", "accepted", "processing"})


def announced(state: str, progress_events: bool) -> bool:
    """Whether a ``task.<state>`` event is published (a caller may skip building its data)."""
    return progress_events or state not in PROGRESS_STATES


async def emit_states(
    publisher: Publisher,
    states: Iterable[str] | None,
    *,
    task_id: str,
    trace_id: str | None,
    agent_id: str | None = None,
    instance_id: str | None = None,
    data: dict[str, Any] | None = None,
    router: str | None = None,
) -> None:
    """Publish one ``task.<state>`` event per applied state (none when refused); `router`:
    the tag of the router that dispatched the task, the routing key's last word."""
    progress = publisher.conn.settings.progress_events
    for state in states or ():
        if not announced(state, progress):
            continue
        await publisher.emit(
            Event(
                type=f"task.{state}",
                task_id=task_id,
                trace_id=trace_id,
                agent_id=agent_id,
                instance_id=instance_id,
                data=data or {},
            ),
            event_routing_key(f"task.{state}", router),
        )


__all__ = ["PROGRESS_STATES", "announced", "emit_states"]
