"""The dispatch step: publish a recorded dispatch to its agent's capability key.

The task is already ``dispatched`` in Redis when the publish goes out (confirmed,
mandatory, expiring after the accept timeout unless the agent's own queue is where it
waits). An unbound key (the agent's queue is gone) excludes that agent and chooses again;
for a task's target it ends the task (``unknown_target``: a target goes nowhere else).
Only a confirmed dispatch counts: the selector's load and learning, the hooks, the
``task.dispatched`` and ``route.decision`` events.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from aiormq.exceptions import PublishError

from mesh.dispatch.events import announced
from mesh.router.plan import RouteChoice, publish_decision
from mesh.router.reasons import Ending, time_left_ms, unknown_target
from mesh.schemas import RouteInfo

if TYPE_CHECKING:
    from mesh.router.choice import Chooser
    from mesh.router.deps import RouterDeps
    from mesh.router.endings import Endings
    from mesh.schemas import TaskEnvelope

logger = logging.getLogger(__name__)


def _tagged(route: RouteInfo, tag: str | None) -> RouteInfo:
    """`route` naming this router as the one its outcome event goes back to."""
    return route if tag is None or route.router == tag else route.model_copy(update={"router": tag})


class Dispatcher:
    def __init__(self, deps: RouterDeps, chooser: Chooser, endings: Endings) -> None:
        self.deps = deps
        self.chooser = chooser
        self.endings = endings

    async def dispatch(
        self,
        envelope: TaskEnvelope,
        choice: RouteChoice,
        raw: bytes,
        received: float,
        *,
        patient: bool = False,
        seeded: bool = False,
    ) -> None:
        """Publish `envelope` to `choice` (inside the hooks' dispatch scope); `seeded`: the
        task's submission seeded this dispatch already (`Intake.admit`)."""
        hooks, exchange = self.deps.hooks, self.deps.topology.capabilities
        with hooks.dispatch(envelope, choice.agent_id, choice.route, exchange):
            await self._dispatch(envelope, choice, raw, received, patient=patient, seeded=seeded)

    async def _dispatch(
        self,
        envelope: TaskEnvelope,
        choice: RouteChoice,
        raw: bytes,
        received: float,
        *,
        patient: bool,
        seeded: bool,
    ) -> None:
        deps = self.deps
        hooks = deps.hooks
        while True:
            left = time_left_ms(envelope)
            # a backlog, or an agent that is restarting: the copy waits up to the deadline
            waits = patient or choice.route.waiting_for_instance
            expiration = left if waits else min(deps.settings.accept_timeout_ms, left)
            key = deps.topology.agent_routing_key(choice.agent_id, envelope.priority)
            sent = envelope.model_copy(update={"route": _tagged(choice.route, deps.outcome_tag)})
            if not seeded:
                await deps.replies.dispatching(envelope, choice.agent_id)
            seeded = False  # a reroute goes to another agent
            try:
                await deps.publisher.publish_envelope(
                    deps.topology.capabilities,
                    key,
                    sent,
                    expiration_ms=expiration,
                    headers=hooks.dispatch_headers(),
                )
                break
            except PublishError:
                logger.info(
                    "task_id=%s: no queue bound for agent=%s", envelope.task_id, choice.agent_id
                )
                hooks.rerouted(choice.agent_id, "unbound")
            envelope = envelope.model_copy(
                update={
                    "excluded_agents": [*envelope.excluded_agents, choice.agent_id],
                    "reroutes": envelope.reroutes + 1,
                }
            )
            rerouting = await deps.store.advance(
                envelope.task_id, "rerouting", "routing", by=deps.router_id, note="unbound"
            )
            if rerouting is None:
                return
            await deps.emit(envelope, rerouting, {"from_agent": choice.agent_id})
            ending = self.chooser.ending(envelope)
            if ending is None and choice.agent_id == envelope.target:
                ending = unknown_target(choice.agent_id)  # a target goes nowhere else
            found = ending if ending is not None else await self.chooser.choose(envelope)
            if isinstance(found, Ending):
                await self.endings.end(envelope, raw, found)
                return
            choice = found
            hooks.chose(choice.agent_id, choice.route)
            moved = await deps.store.advance(
                envelope.task_id, "dispatched", by=deps.router_id, agent_id=choice.agent_id
            )
            if moved is None:
                return
        elapsed = time.perf_counter() - received
        route_ms = round(elapsed * 1000, 3)
        hooks.dispatched(choice.agent_id, choice.route.strategy, elapsed)
        # only now, with the publish confirmed, does the dispatch count (breaker probe,
        # load, learning): a dispatch that did not happen leaves no trace in them
        deps.selector.dispatched(sent, choice)
        if announced("dispatched", deps.settings.progress_events):  # its route costs a dump
            await deps.emit(
                sent,
                ("dispatched",),
                {"route": choice.route.model_dump()},
                agent_id=choice.agent_id,
            )
        await publish_decision(
            deps.publisher,
            sent,
            choice,
            {"route_ms": route_ms},
            choice.explain,
            redact=deps.redact_decisions,
        )
        logger.debug(
            "dispatched task_id=%s agent=%s strategy=%s score=%s route_ms=%.2f",
            envelope.task_id,
            choice.agent_id,
            choice.route.strategy,
            choice.route.score,
            route_ms,
        )


__all__ = ["Dispatcher"]
