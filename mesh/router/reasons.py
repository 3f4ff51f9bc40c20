"""Why the router ends a task itself, and why the broker returned a dispatch (pure).

`ending_of` is checked before any agent is chosen (hops, deadline, reroutes); when nothing
could be chosen, a selector says why in a `NoMatch` and `unmatched` turns it into the
task's ending: one code of `CODES` and one sentence with the facts (the best score and
the threshold, the tags, the agent and when it was last live); `death_reason` reads a
returned dispatch's ``x-death``.

Degradation level 2 is decided here too: a task nothing scored above the threshold for,
with no fallback agent configured and ``MESH_HUMAN_QUEUE`` on, is handed to a person
(status ``queued_for_human``, not terminal) instead of being unroutable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from mesh.schemas import TaskEnvelope, now_ms
from mesh.schemas.result import Status
from mesh.topology import DeadReason

#: every code a task the router could not give to an agent ends with, and what it means
#: (the README's "Unroutable reasons" table; each has one sentence builder below)
CODES: dict[str, str] = {
    "below_threshold": "no agent scored above the similarity threshold (with a fallback "
    "agent configured that could not take it; without one: the human queue)",
    "no_fallback": "no agent scored above the threshold, no fallback agent is configured "
    "and the human queue is off",
    "tags_excluded": "the required tags exclude every agent that could take the task",
    "unknown_target": "the target is no agent of this mesh (no queue is bound for it)",
    "target_excluded": "the target gave the task back already (rejected it or failed)",
    "no_live_instance": "the agent that matches has no live instance",
    "agents_excluded": "every agent that matches was tried already",
    "no_agents": "no agent is registered",
    "no_selector": "an untargeted task reached a router without semantic routing",
    "no_agent": "the selector chose no agent and said no more (a custom selector)",
    "reroutes_exhausted": "no agent accepted the task within max_reroutes",
}

#: what a `NoMatch` says nobody could be chosen for
Cause = Literal[
    "below_threshold",
    "tags",
    "no_live_instance",
    "breaker_open",
    "excluded",
    "no_agents",
    "no_selector",
]


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


@dataclass(frozen=True, slots=True)
class NoMatch:
    """Why a selector chose no agent: the facts of the sentence (`unmatched`)."""

    cause: Cause
    #: the threshold and the best agent and score among those the tags allow
    threshold: float | None = None
    best_agent: str | None = None
    best_score: float | None = None
    #: ``tags``: the required tags no agent above the threshold has (all of them when
    #: each is held by some agent, but no agent holds them together)
    tags: dict[str, str] = field(default_factory=dict)
    #: the agents concerned (no live instance, breaker open, excluded), best first
    agents: tuple[str, ...] = ()
    #: ``no_live_instance``: the epoch ms the agent's last lease ended (None: unknown)
    last_live_ms: int | None = None
    #: the fallback agent configured (None: none) and why it could not take the task
    fallback: str | None = None
    fallback_why: str = ""


def _unroutable(code: str, message: str, details: dict[str, Any]) -> Ending:
    return Ending("unroutable", "unroutable", code, message, details)


def no_agent(envelope: TaskEnvelope) -> Ending:
    """A selector chose nobody and said no more (a custom `Selector` returning None)."""
    tried = ", ".join(envelope.excluded_agents) or "none"
    return _unroutable(
        "no_agent",
        f"the selector chose no agent for the task (agents tried already: {tried})",
        {"excluded_agents": envelope.excluded_agents},
    )


def _scored(miss: NoMatch) -> str:
    if miss.best_agent is None or miss.best_score is None:
        return f"no agent has a score (threshold {miss.threshold or 0:.3f})"
    return (
        f"the best score, {miss.best_score:.3f} ({miss.best_agent}), is below the threshold "
        f"{miss.threshold or 0:.3f}"
    )


def _score_details(miss: NoMatch) -> dict[str, Any]:
    return {
        "best_agent": miss.best_agent,
        "best_score": None if miss.best_score is None else round(miss.best_score, 4),
        "threshold": None if miss.threshold is None else round(miss.threshold, 4),
    }


def below_threshold(miss: NoMatch) -> Ending:
    """Nothing cleared the threshold and the configured fallback agent could not take it."""
    return _unroutable(
        "below_threshold",
        f"{_scored(miss)}, and the fallback agent {miss.fallback} {miss.fallback_why}",
        {**_score_details(miss), "fallback_agent": miss.fallback},
    )


def no_fallback(miss: NoMatch) -> Ending:
    """Nothing cleared the threshold, no fallback agent, and the human queue is off."""
    return _unroutable(
        "no_fallback",
        f"{_scored(miss)}, no fallback agent is configured (MESH_FALLBACK_AGENT) and the "
        "human queue is off (MESH_HUMAN_QUEUE)",
        _score_details(miss),
    )


def queued_for_human(miss: NoMatch, queue: str) -> Ending:
    """Degradation level 2: handed to a person in `queue`; not terminal, no dead letter."""
    return Ending(
        "queued_for_human",
        None,
        "below_threshold",
        f"{_scored(miss)} and no fallback agent is configured: the task waits for a person "
        f"in {queue} (`mesh human`), whose answer follows on this reply queue",
        {**_score_details(miss), "queue": queue},
    )


def tags_excluded(miss: NoMatch, required: dict[str, str]) -> Ending:
    """The required tags leave no agent (naming the tags that did it)."""
    named = ", ".join(f"{k}={v}" for k, v in sorted((miss.tags or required).items()))
    return _unroutable(
        "tags_excluded",
        f"the required tags {named} exclude every agent that could take the task"
        + (f" (the best without them: {miss.best_agent})" if miss.best_agent else ""),
        {"required_tags": required, "excluding_tags": miss.tags or required},
    )


def unknown_target(agent_id: str) -> Ending:
    """A task's target has no queue on the broker: no such agent ever registered."""
    return _unroutable(
        "unknown_target",
        f"the target {agent_id!r} is no agent of this mesh (no queue is bound for it; "
        "`mesh agents` lists them)",
        {"target": agent_id},
    )


def target_excluded(agent_id: str) -> Ending:
    """The target gave the task back (rejected it, or it failed there): not sent again."""
    return _unroutable(
        "target_excluded",
        f"the target {agent_id!r} gave the task back already (it rejected it or failed on "
        "it), and a task with a target goes nowhere else",
        {"target": agent_id},
    )


def no_live_instance(agents: tuple[str, ...], last_live_ms: int | None, at_ms: int) -> Ending:
    """The agent that matches (the best of `agents`) has no live instance."""
    first = agents[0] if agents else "?"
    if last_live_ms is None:
        since = "no live instance of it was ever seen"
    else:
        ago = max(0, at_ms - last_live_ms) / 1000
        when = datetime.fromtimestamp(last_live_ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")
        since = f"its last lease ended {ago:.0f} s ago ({when} UTC)"
    others = f" (nor do {', '.join(agents[1:])})" if len(agents) > 1 else ""
    return _unroutable(
        "no_live_instance",
        f"agent {first!r} matches the task but has no live instance{others}: {since}",
        {"agents": list(agents), "last_live_ms": last_live_ms},
    )


def agents_excluded(agents: tuple[str, ...]) -> Ending:
    """Every agent that matches was tried already (each rejected it or did not take it)."""
    return _unroutable(
        "agents_excluded",
        f"every agent that matches the task was tried already ({', '.join(agents)}): each "
        "rejected it or did not take it in time",
        {"excluded_agents": list(agents)},
    )


def no_agents() -> Ending:
    return _unroutable(
        "no_agents",
        "no agent is registered in this mesh (start one: `mesh worker MODULE:AGENT`)",
        {},
    )


def no_selector() -> Ending:
    return _unroutable(
        "no_selector",
        "this router routes targeted tasks only (it runs without semantic routing): set "
        "the task's target, or run a router with the embedding model",
        {},
    )


def unmatched(envelope: TaskEnvelope, miss: NoMatch | None, *, human_queue: str | None) -> Ending:
    """The ending of a task nobody could be chosen for (None: a selector that says no more).

    `human_queue`: the queue a task below the threshold waits in for a person when no
    fallback agent is configured (None: the human queue is off, ``MESH_HUMAN_QUEUE``).
    """
    if miss is None:
        return no_agent(envelope)
    if miss.cause == "below_threshold":
        if miss.fallback is not None:
            return below_threshold(miss)
        if human_queue is not None:
            return queued_for_human(miss, human_queue)
        return no_fallback(miss)
    if miss.cause == "tags":
        return tags_excluded(miss, dict(envelope.required_tags))
    if miss.cause == "no_live_instance":
        return no_live_instance(miss.agents, miss.last_live_ms, now_ms())
    if miss.cause == "breaker_open":
        return downstream_busy(miss.agents[0] if miss.agents else "?")
    if miss.cause == "excluded":
        return agents_excluded(miss.agents)
    if miss.cause == "no_selector":
        return no_selector()
    return no_agents()


def no_instance_returned(agent_id: str) -> Ending:
    """The task waited in the queue of `agent_id`, which had no live instance (a restart
    within ``agent_return_window_s``), and its deadline passed before one returned."""
    return Ending(
        "expired",
        "expired",
        "no_instance_returned",
        f"the task's deadline passed while it waited in agent {agent_id!r}'s queue for an "
        "instance to return; none did",
        {"agent_id": agent_id},
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
    "CODES",
    "Cause",
    "Ending",
    "NoMatch",
    "agents_excluded",
    "bad_payload",
    "below_threshold",
    "death_reason",
    "downstream_busy",
    "ending_of",
    "no_agent",
    "no_agents",
    "no_fallback",
    "no_instance_returned",
    "no_live_instance",
    "no_selector",
    "queued_for_human",
    "tags_excluded",
    "target_excluded",
    "time_left_ms",
    "unknown_target",
    "unmatched",
]
