"""Choosing an agent: the `Selector` protocol, its outcome, and the plan of one delivery.

`Chooser.plan` is the router's choice step: given an envelope (stamped, believed) and, for
a dispatch that came back, where it came from, it says whether the task ends here (hops,
deadline, reroutes, nothing to choose) or goes to an agent, and how patiently. It changes
nothing: recording and publishing are the next steps' (`mesh.router.intake`,
`mesh.router.returns`, `mesh.router.dispatch`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from mesh.router.endings import Ending, ending_of, no_agent, time_left_ms
from schemas import Event, RouteInfo, TaskEnvelope

if TYPE_CHECKING:
    from mesh.router.deps import RouterDeps
    from mesh.router.returns import Returned


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """The outcome of selection: an agent and how it was chosen, plus explanation data."""

    agent_id: str
    route: RouteInfo
    explain: dict[str, Any] = field(default_factory=dict)


class Selector(Protocol):
    """Chooses an agent for an envelope without a `target` (the semantic router).

    `select` only chooses: it changes nothing. `dispatched` is called once the chosen
    dispatch was published and confirmed (breaker probes, load counts, learning).
    """

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | None: ...

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None: ...

    def is_live(self, agent_id: str) -> bool:
        """Does `agent_id` hold a live lease (an instance that takes its queue)?"""
        ...


class NoSelector:
    """Used until semantic routing is configured: only `target` envelopes are routable."""

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | None:
        return None

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None:
        return None

    def is_live(self, agent_id: str) -> bool:
        return False  # unknown without a snapshot: an expired dispatch is rerouted


def decision_event(
    envelope: TaskEnvelope,
    choice: RouteChoice | None,
    timings: dict[str, float] | None = None,
    explain: dict[str, Any] | None = None,
) -> Event:
    """The ``route.decision`` event of one decision (None: nothing could be chosen)."""
    return Event(
        type="route.decision",
        trace_id=envelope.trace_id,
        task_id=envelope.task_id,
        agent_id=choice.agent_id if choice else None,
        data={
            "capability": envelope.capability[:500],
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


@dataclass(frozen=True, slots=True)
class Plan:
    """What becomes of one delivery: an agent (`choice`), or an `ending`, never both."""

    envelope: TaskEnvelope
    choice: RouteChoice | None
    ending: Ending | None
    #: back into a live agent's own queue, waiting up to the deadline (a backlog)
    patient: bool = False


class Chooser:
    """The choice step: target or selector, or why the task ends before any agent."""

    def __init__(self, deps: RouterDeps) -> None:
        self.deps = deps

    async def choose(self, envelope: TaskEnvelope) -> RouteChoice | None:
        if envelope.target is not None:
            if envelope.target in envelope.excluded_agents:
                return None
            return RouteChoice(envelope.target, RouteInfo(strategy="target"))
        return await self.deps.selector.select(envelope)

    def ending(self, envelope: TaskEnvelope) -> Ending | None:
        return ending_of(envelope, self.deps.settings.max_reroutes)

    async def plan(self, envelope: TaskEnvelope, returned: Returned | None) -> Plan:
        ending = self.ending(envelope)
        backlog = returned.backlog if returned is not None else None
        patient = backlog is not None and time_left_ms(envelope) > 0
        if backlog is not None and backlog == envelope.target:
            choice = None  # the target's own queue is where it will be served
        else:
            choice = None if ending is not None else await self.choose(envelope)
        if returned is not None and backlog is not None and choice is None and patient:
            # the accept timeout is for agents that take no work; this one is live and
            # works through a backlog: back into its queue, waiting up to the deadline,
            # and it does not count as a reroute (another agent was tried first)
            original = returned.original
            route = original.route or RouteInfo(strategy="target")
            return Plan(original, RouteChoice(backlog, route), None, patient=True)
        if ending is None and choice is None:
            ending = no_agent(envelope)
        if returned is not None:
            self.deps.hooks.rerouted(returned.agent_id, returned.reason)
        return Plan(envelope, choice, ending)


__all__ = ["Chooser", "NoSelector", "Plan", "RouteChoice", "Selector", "decision_event"]
