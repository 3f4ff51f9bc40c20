"""Why the router ends a task itself, and why the broker returned a dispatch (pure).

`ending_of` is checked before any agent is chosen (hops, deadline, reroutes); `no_agent`
when nothing could be chosen; `death_reason` reads a returned dispatch's ``x-death``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from mesh.schemas import TaskEnvelope, now_ms
from mesh.schemas.result import Status
from mesh.topology import DeadReason


class Ending(NamedTuple):
    """A task the router ends itself: status, dead-letter queue (None: no dead letter),
    error code and message."""

    status: Status
    reason: DeadReason | None
    code: str
    message: str
    details: dict[str, Any] | None = None


def time_left_ms(envelope: TaskEnvelope) -> int:
    """Milliseconds to the task's deadline (its whole timeout before it is stamped)."""
    if envelope.deadline_ms is None:
        return envelope.timeout_ms
    return envelope.deadline_ms - now_ms()


def no_agent(envelope: TaskEnvelope) -> Ending:
    """Nothing could be chosen for `envelope`."""
    return Ending(
        "unroutable",
        "unroutable",
        "no_agent",
        "no live agent matches the task",
        {"excluded_agents": envelope.excluded_agents},
    )


def downstream_busy(agent_id: str) -> Ending:
    """`agent_id`'s breaker is open: the caller is told at once, its deadline not spent, and
    nothing is dead-lettered (the task was never the mesh's to keep)."""
    return Ending(
        "failed",
        None,
        "downstream_busy",
        f"agent {agent_id!r} is failing (its circuit breaker is open); try again later",
        {"target": agent_id},
    )


def bad_payload(agent_id: str, errors: list[dict[str, str]]) -> Ending:
    """A targeted task's payload does not fit `agent_id`'s input schema: refused before
    it is dispatched, naming each bad field (the caller's to fix; nothing is kept)."""
    named = "; ".join(f"{e['field']}: {e['message']}" for e in errors)
    return Ending(
        "failed",
        None,
        "bad_payload",
        f"the payload does not fit agent {agent_id}'s input schema: {named}",
        {"target": agent_id, "errors": errors},
    )


def ending_of(envelope: TaskEnvelope, max_reroutes: int) -> Ending | None:
    """Why the task must end before any agent is chosen (hops, deadline, reroutes)."""
    if envelope.hops >= envelope.max_hops and envelope.hops > 0:
        return Ending(
            "dead",
            "hops",
            "max_hops_exceeded",
            f"hops={envelope.hops} reached max_hops={envelope.max_hops}",
            {"trajectory": envelope.trajectory},
        )
    if time_left_ms(envelope) <= 0:
        return Ending(
            "expired",
            "expired",
            "deadline_passed",
            "the task's deadline passed before it could be dispatched",
        )
    if envelope.reroutes > max_reroutes:
        return Ending(
            "unroutable",
            "unroutable",
            "reroutes_exhausted",
            f"no agent accepted the task after {envelope.reroutes - 1} reroutes",
            {"excluded_agents": envelope.excluded_agents},
        )
    return None


def death_reason(headers: dict[str, Any]) -> str:
    """Why RabbitMQ dead-lettered a dispatch: expired, rejected, delivery_limit, maxlen."""
    reason = headers.get("x-first-death-reason")
    if isinstance(reason, bytes):
        reason = reason.decode()
    if isinstance(reason, str):
        return reason
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        first = deaths[0].get("reason")
        return first.decode() if isinstance(first, bytes) else str(first)
    return "unknown"


__all__ = [
    "Ending",
    "bad_payload",
    "death_reason",
    "downstream_busy",
    "ending_of",
    "no_agent",
    "time_left_ms",
]
