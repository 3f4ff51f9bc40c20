"""Dispatches that come back: from an agent queue, dead-lettered by the broker.

A dispatch nobody took before the accept timeout, one a worker rejected, or one past its
delivery limit returns to the router queue with ``x-death``. `Returns.of` reads why and
what to exclude; `Returns.record` moves the task back to ``routing`` (and on to its next
dispatch), or says the copy is stale.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mesh.router.reasons import death_reason

if TYPE_CHECKING:
    from mesh.router.deps import RouterDeps
    from mesh.router.plan import Plan
    from mesh.schemas import TaskEnvelope

logger = logging.getLogger(__name__)


def before_dispatch(states: Any) -> list[str]:
    """States recorded with a dispatch, less ``dispatched`` (emitted after the confirm)."""
    return [s for s in states or () if s != "dispatched"]


@dataclass(frozen=True, slots=True)
class Returned:
    """A dispatch back from `agent_id`'s queue."""

    agent_id: str
    #: why the broker returned it (`death_reason`)
    reason: str
    #: the envelope as it came back
    original: TaskEnvelope
    #: the copy to route again: `agent_id` excluded (unless it is the target and the copy
    #: only expired), one reroute more
    envelope: TaskEnvelope
    #: a live agent whose queue held the dispatch past the accept timeout (a backlog), or
    #: one restarting (no live instance, a lease ended within ``agent_return_window_s``)
    backlog: str | None


class Returns:
    def __init__(self, deps: RouterDeps) -> None:
        self.deps = deps

    def of(
        self, envelope: TaskEnvelope, headers: dict[str, Any], routing_key: str
    ) -> Returned | None:
        """The return `envelope` is, or None for a task from ingress."""
        agent_id = self.deps.topology.agent_of_routing_key(routing_key)
        if agent_id is None or "x-death" not in headers:
            return None
        reason = death_reason(headers)
        # nobody took it in time from a live agent's queue (a backlog), or from the queue of
        # one that is restarting: it goes back there to wait (`Chooser.plan`)
        selector = self.deps.selector
        live = reason == "expired" and (selector.is_live(agent_id) or selector.awaited(agent_id))
        # a target is the only candidate: when nobody took it in time (a busy or
        # reconnecting worker) it is tried again; a rejection or a poison delivery
        # limit excludes it, like any other agent
        retry_target = envelope.target == agent_id and reason == "expired"
        excluded = envelope.excluded_agents
        rerouted = envelope.model_copy(
            update={
                "excluded_agents": excluded if retry_target else [*excluded, agent_id],
                "reroutes": envelope.reroutes + 1,
            }
        )
        logger.info(
            "task_id=%s came back from agent=%s (%s; reroute %d)",
            envelope.task_id,
            agent_id,
            reason,
            rerouted.reroutes,
        )
        return Returned(agent_id, reason, envelope, rerouted, agent_id if live else None)

    async def record(self, plan: Plan, returned: Returned, *, redelivered: bool) -> bool:
        """Move the task back to ``routing`` (and ``dispatched`` when an agent was chosen);
        False when this copy is done with (stale, or finished meanwhile)."""
        deps = self.deps
        envelope, choice = plan.envelope, plan.choice
        agent = choice.agent_id if choice is not None else ""
        dispatch = ("dispatched",) if choice is not None else ()
        applied = await deps.store.advance(
            envelope.task_id,
            "rerouting",
            "routing",
            *dispatch,
            by=deps.router_id,
            note=returned.agent_id,
            agent_id=agent,
        )
        if applied is None:
            applied = await self._refused(
                envelope, dispatch, agent, redelivered=redelivered, ran=returned.reason != "expired"
            )
        if applied is None:
            return False
        await deps.emit(envelope, before_dispatch(applied), {"from_agent": returned.agent_id})
        return True

    async def _refused(
        self,
        envelope: TaskEnvelope,
        dispatch: tuple[str, ...],
        agent: str,
        *,
        redelivered: bool,
        ran: bool,
    ) -> list[str] | None:
        """A returned dispatch whose move back to ``routing`` was refused: why, and what now.

        - No record at all: Redis lost it (restarted without persistence) while the broker
          held the task. It is recorded again, ``recovered`` when an agent may have run it
          (`ran`: anything but an expiry in the queue), so its side effects are refused.
        - ``routing`` or ``dispatched`` on a redelivered copy: an earlier pass of this very
          message moved the state, then failed before publishing; it goes on from there.
        - Anything else (finished, or held by a worker): a stale copy, nothing to do.

        Returns the states applied, or None when the message is done with.
        """
        deps = self.deps
        task_id = envelope.task_id
        state = (await deps.store.state(task_id)).get("state", "")
        if state == "":
            states = ("submitted", "routing", *dispatch)
            sub = await deps.store.submit(
                envelope,
                redelivered=False,
                states=states,
                by=deps.router_id,
                agent_id=agent,
                recovered=ran,
            )
            if sub.status != "new":
                return None
            logger.warning(
                "task_id=%s came back but its record was gone (Redis lost its data?): "
                "recorded again%s",
                task_id,
                "; its side effects are refused" if ran else "",
            )
            return list(states)
        if redelivered and state in ("routing", "dispatched"):
            if state == "routing":
                path: tuple[str, ...] = ("routing", *dispatch)
            else:
                path = ("dispatched",) if dispatch else ("dispatched", "rerouting", "routing")
            logger.info("task_id=%s redelivered in state %s: going on", task_id, state)
            return await deps.store.advance(task_id, *path, by=deps.router_id, agent_id=agent)
        # finished meanwhile (a duplicate copy completed), or a worker holds it
        return None


__all__ = ["Returned", "Returns", "before_dispatch"]
