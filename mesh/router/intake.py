"""The intake step: a body from the router queue becomes a believed, recorded task.

`Intake.decode` turns the body into a `TaskEnvelope` (an invalid one is answered and
dead-lettered); `Intake.stamp` adds what ingress owes a task (creation time, absolute
deadline, the AMQP reply route); `Intake.admit` records a new task with its whole path in
one Redis step, or answers (or joins) a duplicate of its task_id.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Literal

from mesh.access.refusal import Refusal
from mesh.messaging import waiter_of
from mesh.router.budget import IngressBudget
from mesh.router.delivery import Delivery
from mesh.router.returns import before_dispatch
from mesh.schemas import InvalidEnvelope, TaskEnvelope, decode, now_ms

if TYPE_CHECKING:
    from mesh.router.deps import RouterDeps
    from mesh.router.endings import Endings
    from mesh.router.plan import Plan

logger = logging.getLogger(__name__)

#: what `Intake.admit` says: stop here (``""``: answered, joined, refused), go on
#: (``go``), or go on with the first dispatch seeded already (``seeded``)
Admitted = Literal["", "go", "seeded"]

#: at most one warning this often while users are over their ingress budget
BUDGET_LOG_S = 60.0


class Intake:
    def __init__(self, deps: RouterDeps, endings: Endings) -> None:
        self.deps = deps
        self.endings = endings
        #: task_ids seen again (answered from the stored Result, or joined)
        self.duplicates = 0
        #: what each broker user may send to ingress (`mesh.router.budget`)
        self.budget = IngressBudget(deps.settings)
        self._budget_logged = 0.0

    async def within_budget(self, delivery: Delivery) -> bool:
        """Charge an ingress delivery to its sender's budget; over it, the delivery is
        refused before it is decoded: answered on the sender's own reply queue, neither
        routed nor dead-lettered (a flood must cost the mesh as little as possible)."""
        if self.deps.topology.agent_of_routing_key(delivery.routing_key) is not None:
            return True  # a dispatch back from an agent queue: the mesh's own
        user = delivery.user_id or ""
        if self.budget.allow(user, len(delivery.body)):
            return True
        now = time.monotonic()
        if now - self._budget_logged >= BUDGET_LOG_S:
            self._budget_logged = now
            logger.warning(
                "ingress budget exceeded: %s refused so far (by user: %s)",
                sum(self.budget.refused.values()),
                dict(sorted(self.budget.refused.items())),
            )
        await self.endings.over_budget(delivery)
        return False

    def decode_body(self, delivery: Delivery) -> TaskEnvelope:
        """The envelope (raises `InvalidEnvelope`: nothing answered)."""
        return decode(
            TaskEnvelope, delivery.body, max_payload_bytes=self.deps.settings.max_payload_bytes
        )

    async def decode(self, delivery: Delivery) -> TaskEnvelope | None:
        """The envelope, or None when the body is invalid (answered and dead-lettered)."""
        try:
            return self.decode_body(delivery)
        except InvalidEnvelope as exc:
            await self.endings.invalid(
                exc, delivery.reply_to, delivery.correlation_id, delivery.user_id
            )
            return None

    @staticmethod
    def stamp(envelope: TaskEnvelope, delivery: Delivery) -> TaskEnvelope:
        """Ingress bookkeeping: creation time and an absolute deadline when absent, and the
        AMQP reply route (properties) when the body has none."""
        now = now_ms()
        reply_to, correlation_id = delivery.reply_to, delivery.correlation_id
        update: dict[str, Any] = {}
        if envelope.reply_to is None and reply_to:
            update["reply_to"] = reply_to[:255]
        if envelope.correlation_id is None and correlation_id not in (None, "", envelope.task_id):
            update["correlation_id"] = str(correlation_id)[:255]
        if envelope.created_ms is None:
            update["created_ms"] = now
        if envelope.deadline_ms is None:
            update["deadline_ms"] = now + envelope.timeout_ms
        return envelope.model_copy(update=update) if update else envelope

    async def admit(self, plan: Plan, delivery: Delivery) -> Admitted:
        """Record a new task (with its dispatch when chosen); answer or join a duplicate.

        Truthy when the task must go on (dispatched, or ended when nothing was chosen):
        ``seeded`` when its dispatch was seeded with its record (`ReplyPath.seed_until`:
        the dispatch need not seed it again), else ``go``.
        """
        deps = self.deps
        envelope, choice = plan.envelope, plan.choice
        agent = choice.agent_id if choice is not None else ""
        dispatch = ("dispatched",) if choice is not None else ()
        states = ("submitted", "routing", *dispatch)
        sender, sender_agent = deps.guard.sender(delivery.user_id)
        sub = await deps.store.submit(
            envelope,
            redelivered=delivery.redelivered,
            states=states,
            by=deps.router_id,
            agent_id=agent,
            sender=sender,
            sender_agent=sender_agent,
            seed_until=deps.replies.seed_until(envelope) if choice is not None else None,
        )
        if sub.status == "foreign":
            text = f"task_id {envelope.task_id} or trace_id {envelope.trace_id} is another user's"
            refusal = Refusal("task_id_in_use", text, answer=True)
            await self.endings.refuse(envelope, delivery.body, refusal)
            return ""
        if sub.status == "new":
            await deps.emit(envelope, before_dispatch(states))
            return "seeded" if sub.seeded else "go"
        if sub.status == "resume":
            logger.info(
                "task_id=%s redelivered in state %s: routing it", envelope.task_id, sub.state
            )
            if not dispatch:
                return "go"
            path = ("dispatched",) if sub.state == "dispatched" else ("routing", "dispatched")
            moved = await deps.store.advance(
                envelope.task_id, *path, by=deps.router_id, agent_id=agent
            )
            return "go" if moved is not None else ""
        self.duplicates += 1
        if sub.status == "answered":
            logger.info("redelivered task_id=%s was answered already", envelope.task_id)
        elif sub.status == "done" and sub.result is not None:
            logger.info("duplicate task_id=%s answered from its stored result", envelope.task_id)
            await deps.reply(waiter_of(envelope), await deps.replies.answer_of(sub.result))
        else:
            logger.info(
                "duplicate task_id=%s in state %s: its caller waits for the same Result",
                envelope.task_id,
                sub.state,
            )
        return ""


__all__ = ["Admitted", "Intake"]
