"""The choice step: an agent for a delivery, or why it ends here.

`Chooser.plan` is the router's choice step: given an envelope (stamped, believed) and, for
a dispatch that came back, where it came from, it says whether the task ends here (hops,
deadline, reroutes, nothing to choose) or goes to an agent, and how patiently. It changes
nothing: recording and publishing are the next steps' (`mesh.router.intake`,
`mesh.router.returns`, `mesh.router.dispatch`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mesh.router.plan import Plan, RouteChoice
from mesh.router.reasons import (
    Ending,
    bad_payload,
    downstream_busy,
    ending_of,
    no_agent,
    no_instance_returned,
    target_excluded,
    time_left_ms,
    unmatched,
)
from mesh.schemas import RouteInfo, TaskEnvelope

if TYPE_CHECKING:
    from mesh.router.deps import RouterDeps
    from mesh.router.returns import Returned


class Chooser:
    """The choice step: target or selector, or why the task ends before any agent."""

    def __init__(self, deps: RouterDeps) -> None:
        self.deps = deps

    async def choose(self, envelope: TaskEnvelope) -> RouteChoice | Ending:
        """An agent, or the ending that says why none (`mesh.router.reasons.unmatched`)."""
        if envelope.target is not None:
            if envelope.target in envelope.excluded_agents:
                return target_excluded(envelope.target)
            # a target that is restarting: the task waits in its queue for an instance
            waiting = self.deps.selector.awaited(envelope.target)
            return RouteChoice(
                envelope.target, RouteInfo(strategy="target", waiting_for_instance=waiting)
            )
        found = await self.deps.selector.select(envelope)
        if isinstance(found, RouteChoice):
            return found
        deps = self.deps
        human = deps.topology.human if deps.settings.human_queue else None
        return unmatched(envelope, found, human_queue=human)

    def ending(self, envelope: TaskEnvelope) -> Ending | None:
        return ending_of(envelope, self.deps.settings.max_reroutes)

    async def plan(self, envelope: TaskEnvelope, returned: Returned | None) -> Plan:
        ending = self.ending(envelope)
        if ending is not None and returned is not None and ending.status == "expired":
            ending = self._not_back(returned) or ending
        backlog = returned.backlog if returned is not None else None
        patient = backlog is not None and time_left_ms(envelope) > 0
        choice: RouteChoice | None = None
        missed: Ending | None = None
        if backlog is not None and backlog == envelope.target:
            pass  # the target's own queue is where it will be served
        elif ending is None:
            chosen = await self.choose(envelope)
            choice, missed = (chosen, None) if isinstance(chosen, RouteChoice) else (None, chosen)
        if returned is not None and backlog is not None and choice is None and patient:
            # the accept timeout is for agents that take no work; this one is live and
            # works through a backlog: back into its queue, waiting up to the deadline,
            # and it does not count as a reroute (another agent was tried first)
            # (or one that is restarting: it waits there for an instance to return)
            original = returned.original
            route = (original.route or RouteInfo(strategy="target")).model_copy(
                update={"waiting_for_instance": not self.deps.selector.is_live(backlog)}
            )
            return Plan(original, RouteChoice(backlog, route), None, patient=True)
        target = envelope.target
        if (
            choice is not None
            and target is not None
            and not await self.deps.selector.admits(target)
        ):
            choice, ending = None, downstream_busy(target)
        elif choice is not None and target is not None:
            errors = self.deps.selector.contract_errors(target, envelope.payload)
            if errors:
                choice, ending = None, bad_payload(target, errors)
        if ending is None and choice is None:
            ending = missed or no_agent(envelope)
        if returned is not None:
            self.deps.hooks.rerouted(returned.agent_id, returned.reason)
        # an agent that is restarting: the dispatch waits in its queue up to the deadline
        patient = choice is not None and choice.route.waiting_for_instance
        return Plan(envelope, choice, ending, patient=patient)

    def _not_back(self, returned: Returned) -> Ending | None:
        """A copy back at its deadline from the queue of an agent awaited (no live
        instance, a recent lease): it waited there for one, and none returned in time."""
        selector, agent_id = self.deps.selector, returned.agent_id
        route = returned.original.route
        waited = (route is not None and route.waiting_for_instance) or selector.awaited(agent_id)
        if returned.reason != "expired" or not waited or selector.is_live(agent_id):
            return None
        return no_instance_returned(agent_id)


__all__ = ["Chooser"]
