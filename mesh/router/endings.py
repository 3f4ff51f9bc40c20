"""The terminal step: how the router ends what it cannot route.

`Endings` carries out an `mesh.router.reasons.Ending`: the task's Result is recorded,
every caller answered, the body dead-lettered with the reason. An ending of status
``queued_for_human`` (degradation level 2) is no end: the task is handed to the human
queue (`mesh.dispatch.human.HumanDesk`) and its callers get the interim Result.
A body that does not decode and a message the guard does not believe end here too,
answered first when their reply route allows it, then kept in ``dead.invalid``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from mesh.access.refusal import Refusal
from mesh.dispatch.human import HumanDesk
from mesh.messaging import waiter, waiter_of
from mesh.results import error_result
from mesh.retrying import TRANSIENT_ERRORS
from mesh.router.reasons import Ending
from mesh.schemas import InvalidEnvelope, Result, TaskEnvelope
from mesh.schemas.codec import peek
from mesh.schemas.result import ErrorInfo

if TYPE_CHECKING:
    from mesh.router.delivery import Delivery
    from mesh.router.deps import RouterDeps

logger = logging.getLogger(__name__)


class Endings:
    """The terminal step: answer, record, dead-letter."""

    def __init__(self, deps: RouterDeps) -> None:
        self.deps = deps
        #: the human queue (degradation level 2)
        self.desk = HumanDesk(deps.publisher, deps.store, deps.settings)
        #: messages the guard did not believe (or whose task_id is another user's)
        self.refused = 0

    async def end(self, envelope: TaskEnvelope, raw: bytes, ending: Ending) -> None:
        """Record the Result, answer every caller, dead-letter with the reason.

        The Result is stored with the task, so a later duplicate of the task_id gets the
        same answer; every reply_to recorded for the task_id is answered.
        """
        deps = self.deps
        status, reason, code, message, details = ending
        if status == "queued_for_human":
            error = ErrorInfo(code=code, message=message, details=details or {})
            if await self.desk.hand_over(envelope, details or {}, error, by=deps.router_id):
                deps.hooks.annotate(status, code)
            return
        claims = int((await deps.store.holder_of(envelope.task_id)).get("claims", 0) or 0)
        if claims:
            # the caller must not read "never ran": an instance that then died had started it
            message += (
                f"; it had started on an instance ({claims} claim(s)), so side effects of "
                "its handler may have happened"
            )
            details = {**(details or {}), "started": True}
        result = error_result(envelope, status, code, message, details)
        commit = await deps.store.finish(result, status, by=deps.router_id, note=code)
        if commit.status == "done":
            logger.info("task_id=%s already finished; %s dropped", envelope.task_id, code)
            return
        deps.hooks.annotate(status, code)
        deps.hooks.ended(status)
        waiters = set(commit.waiters)
        own = waiter_of(envelope)
        if own:
            waiters.add(own)
        for each in sorted(waiters):
            await deps.reply(each, result)
        await deps.store.mark_replied(envelope.task_id)
        if reason is not None:
            await deps.dead_letter(
                reason,
                raw,
                details={"code": code, "message": message, **(details or {})},
                task_id=envelope.task_id,
            )
        await deps.emit(envelope, (status,), {"code": code, "message": message})

    async def refuse(self, envelope: TaskEnvelope, body: bytes, refusal: Refusal) -> None:
        """An ingress message the guard does not believe: kept in ``dead.invalid``, and its
        sender answered only when its reply route is its own (`Refusal.answer`)."""
        self.refused += 1
        logger.warning("task_id=%s refused: %s", envelope.task_id, refusal.message)
        if refusal.answer:
            result = error_result(envelope, "failed", refusal.code, refusal.message)
            await self.deps.reply(waiter_of(envelope), result)
        details = {"code": refusal.code, "message": refusal.message}
        await self.deps.dead_letter("invalid", body, details=details)

    async def invalid(
        self,
        exc: InvalidEnvelope,
        reply_to: str | None = None,
        correlation_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        """Answer an invalid body where it says (or the AMQP reply_to), dead-letter it."""
        error = ErrorInfo(
            code="invalid_envelope", message=str(exc)[:8_000], details=exc.as_details()
        )
        await self._answer_raw(exc.raw, reply_to, correlation_id, user_id, error)
        await self.deps.dead_letter("invalid", exc.raw, details=exc.as_details())

    async def over_budget(self, delivery: Delivery) -> None:
        """A delivery its sender's ingress budget could not pay: answered, not kept."""
        self.refused += 1
        message = (
            "this user's ingress budget is spent (MESH_INGRESS_RATE_PER_USER, "
            "MESH_INGRESS_BYTES_PER_USER); send more slowly"
        )
        error = ErrorInfo(code="ingress_budget_exceeded", message=message)
        await self._answer_raw(
            delivery.body, delivery.reply_to, delivery.correlation_id, delivery.user_id, error
        )

    async def broken(
        self,
        body: bytes,
        reply_to: str | None = None,
        correlation_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        """A body the router failed on (a bug): its caller is told, it is dead-lettered."""
        message = "the router failed on this task (a bug); it was dead-lettered"
        error = ErrorInfo(code="router_error", message=message)
        try:
            await self._answer_raw(body, reply_to, correlation_id, user_id, error)
        finally:
            await self.deps.dead_letter(
                "unroutable", body, details={"error": "router internal error"}
            )

    async def spent(self, delivery: Delivery, checked: TaskEnvelope | Refusal | None) -> None:
        """The last delivery a quorum router queue allows (`Topology.last_delivery`): the
        broker would drop the message if it came back once more (an outage held it past
        `mesh.wire.OUTAGE_HOLD_S` that many times, or a router died routing it). It is
        not routed again: ended ``failed`` with code ``delivery_limit``, its callers
        answered, the body kept in ``dead.retries``. `checked`: the envelope as the guard
        let it through when it would be routed (a dispatch back from an agent's queue as
        its router's, an ingress task as its caller's), a refusal, or None for a body that
        does not decode; those two are answered only where the sender may be answered.
        With Redis away the Result is not recorded: its sender is answered from the body
        and the body kept all the same."""
        count = delivery.headers.get("x-delivery-count")
        message = (
            f"the router queue delivered this task {count} times without routing it (an "
            "outage each time, or a router that died on it; MESH_DELIVERY_LIMIT): it was "
            "dead-lettered, not routed again"
        )
        details = {"deliveries": count}
        logger.error("%s (%s)", message, peek(delivery.body, "task_id") or "no task_id")
        if isinstance(checked, TaskEnvelope):
            ending = Ending("failed", "retries", "delivery_limit", message, details)
            try:
                await self.end(checked, delivery.body, ending)
                return
            except TRANSIENT_ERRORS as exc:
                logger.warning("task_id=%s ended without its record: %r", checked.task_id, exc)
        error = ErrorInfo(code="delivery_limit", message=message, details=details)
        await self._answer_raw(
            delivery.body, delivery.reply_to, delivery.correlation_id, delivery.user_id, error
        )
        await self.deps.dead_letter(
            "retries", delivery.body, details={"code": "delivery_limit", **details}
        )

    async def _answer_raw(
        self,
        raw: bytes,
        reply_to: str | None,
        correlation_id: str | None,
        user_id: str | None,
        error: ErrorInfo,
    ) -> None:
        """Answer a body that is no `TaskEnvelope` where it says (or the AMQP reply_to),
        only when the guard lets its sender be answered there (its own reply queue)."""
        reply_to = peek(raw, "reply_to") or reply_to
        if reply_to is None or not self.deps.guard.may_answer(reply_to, user_id):
            return
        task_id = peek(raw, "task_id") or "unknown"
        result = Result(
            task_id=task_id[:128],
            trace_id=(peek(raw, "trace_id") or "")[:128] or None,
            status="failed",
            error=error,
        )
        await self.deps.reply(waiter(reply_to, correlation_id), result)


__all__ = ["Endings"]
