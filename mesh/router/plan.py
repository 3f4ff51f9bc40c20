"""What choosing produces: `RouteChoice`, the `Selector` that makes one, and a `Plan`.

Types only (and the decision event of a choice): the router's steps and the semantic
selector share them without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from mesh.messaging import Publisher
from mesh.router.reasons import Ending, NoMatch
from mesh.schemas import Event, RouteInfo, TaskEnvelope
from mesh.topology import REDACTED_DECISION_KEY


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """The outcome of selection: an agent and how it was chosen, plus explanation data."""

    agent_id: str
    route: RouteInfo
    explain: dict[str, Any] = field(default_factory=dict)
    #: the cold agents close on the task, whose quota counts it once it is dispatched
    #: (`mesh.router.coldstart`)
    contested: tuple[str, ...] = ()
    #: learn the task's text for `agent_id` when it completes; False on a detour around a
    #: more relevant agent's open breaker, which must not outlive the outage
    learns: bool = True


class Selector(Protocol):
    """Chooses an agent for an envelope without a `target` (the semantic router).

    `select` only chooses: it changes nothing; when it chooses nobody it says why in a
    `NoMatch` (None: it says no more, code ``no_agent``). `dispatched` is called once the
    chosen dispatch was published and confirmed (breaker probes, load counts, learning).
    """

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | NoMatch | None: ...

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None: ...

    def is_live(self, agent_id: str) -> bool:
        """Does `agent_id` hold a live lease (an instance that takes its queue)?"""
        ...

    def awaited(self, agent_id: str) -> bool:
        """Has `agent_id` no live instance, but one whose lease ended within
        ``agent_return_window_s`` (a restart)? A task for it waits in its queue."""
        ...

    async def admits(self, agent_id: str) -> bool:
        """May a task go to `agent_id` now (a target, a handoff)? False while its circuit
        breaker is open, this router's or another's."""
        ...

    @property
    def outcome_tag(self) -> str | None:
        """The tag outcome events of this router's dispatches carry (None: it learns from
        no outcome, and they carry none)."""
        ...

    def contract_errors(self, agent_id: str, payload: dict[str, Any]) -> list[dict[str, str]]:
        """How `payload` breaks the input schema `agent_id` registered ([]: it fits, or the
        agent declared none)."""
        ...


class NoSelector:
    """Used until semantic routing is configured: only `target` envelopes are routable."""

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | NoMatch | None:
        return NoMatch("no_selector")

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None:
        return None

    def is_live(self, agent_id: str) -> bool:
        return False  # unknown without a snapshot: an expired dispatch is rerouted

    def awaited(self, agent_id: str) -> bool:
        return False  # unknown without a snapshot: a target's copy is sent again

    async def admits(self, agent_id: str) -> bool:
        return True  # no outcomes followed, no breakers

    @property
    def outcome_tag(self) -> str | None:
        return None

    def contract_errors(self, agent_id: str, payload: dict[str, Any]) -> list[dict[str, str]]:
        return []  # no registrations followed


def decision_event(
    envelope: TaskEnvelope,
    choice: RouteChoice | None,
    timings: dict[str, float] | None = None,
    explain: dict[str, Any] | None = None,
    *,
    redact: bool = False,
) -> Event:
    """The ``route.decision`` event of one decision (None: nothing could be chosen);
    `redact`: without the request's text (`mesh.topology.redacts_decisions`)."""
    text: dict[str, Any] = (
        {"capability_chars": len(envelope.capability)}
        if redact
        else {"capability": envelope.capability[:500]}
    )
    return Event(
        type="route.decision",
        trace_id=envelope.trace_id,
        task_id=envelope.task_id,
        agent_id=choice.agent_id if choice else None,
        data={
            **text,
            # where the task sits in its trace (`mesh trace` draws handoffs and budgets)
            "parent_task_id": envelope.parent_task_id,
            "hops": envelope.hops,
            "deadline_ms": envelope.deadline_ms,
            "route": choice.route.model_dump() if choice else None,
            "excluded": list(envelope.excluded_agents),
            "timings": timings or {},
            **(explain or {}),
        },
    )


async def publish_decision(
    publisher: Publisher,
    envelope: TaskEnvelope,
    choice: RouteChoice | None,
    timings: dict[str, float] | None = None,
    explain: dict[str, Any] | None = None,
    *,
    redact: bool,
) -> None:
    """Send the ``route.decision`` of one decision; `redact`: without the request's text,
    chosen once per process (`mesh.topology.redacts_decisions`)."""
    await publisher.emit(
        decision_event(envelope, choice, timings, explain, redact=redact),
        REDACTED_DECISION_KEY if redact else None,
    )


@dataclass(frozen=True, slots=True)
class Plan:
    """What becomes of one delivery: an agent (`choice`), or an `ending`, never both."""

    envelope: TaskEnvelope
    choice: RouteChoice | None
    ending: Ending | None
    #: back into a live agent's own queue, waiting up to the deadline (a backlog)
    patient: bool = False


__all__ = ["NoSelector", "Plan", "RouteChoice", "Selector", "decision_event"]
