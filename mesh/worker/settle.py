"""`Settler`: the only code in a worker that acks, nacks, rejects or republishes a delivery.

Every way a delivery can end has a method here: the outcome of a run (`settle`: fenced
commit, replies, dead letter, ack; a retry through `mesh.retry.<delay>`; a reject back to
the router), and every way a delivery ends without a run (an unreadable body, a redelivery
of a task still running, a claim that is done, stale, busy or refused, a broker or Redis
outage, a bug while settling).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from mesh.dispatch.events import emit_states
from mesh.dispatch.store import Claim, Commit, Holder
from mesh.hooks import NO_HOOKS, Hooks
from mesh.messaging import envelope_message
from mesh.outage import Outages, describe
from mesh.retrying import TRANSIENT_ERRORS, quietly, with_retries
from mesh.schemas import Event, InvalidEnvelope, Result, TaskEnvelope, encode
from mesh.topology import (
    DEFERRED_HEADER,
    DELAY_HEADER,
    LAST_ERROR_HEADER,
    DeadReason,
    event_routing_key,
)
from mesh.worker.answers import Answers
from mesh.worker.deps import WorkerDeps
from mesh.worker.outcome import Outcome, nearest_delay, terminal_result, unstorable_result

logger = logging.getLogger(__name__)


class Settler:
    """Turns what became of a delivery into AMQP actions, for one worker instance."""

    def __init__(self, deps: WorkerDeps, answers: Answers) -> None:
        self.deps = deps
        #: how Results reach the callers (chosen once: `mesh.worker.answers`)
        self.answers = answers
        #: terminal statuses, end-to-end times, retries, dead letters, spans (`mesh.hooks`);
        #: the runtime sets its own once started
        self.hooks: Hooks = NO_HOOKS
        self.completed = 0

    @property
    def _outages(self) -> Outages:
        return self.deps.publisher.conn.outages

    # --- deliveries that end without a run ------------------------------------------------
    async def invalid(self, message: AbstractIncomingMessage, exc: InvalidEnvelope) -> None:
        """A body that does not decode: to `mesh.dead.invalid`, byte for byte."""
        if await self.deps.publisher.dead_letter("invalid", exc.raw, details=exc.as_details()):
            self.hooks.dead_lettered("invalid")
        await quietly(message.ack())

    async def duplicate(self, message: AbstractIncomingMessage) -> None:
        """A redelivery of a task that ran here meanwhile: the run settled it."""
        await quietly(message.ack())

    async def claimed(
        self, message: AbstractIncomingMessage, envelope: TaskEnvelope, claim: Claim
    ) -> None:
        """A claim that is not ``claimed``: done, stale, busy or refused."""
        if claim.status == "done":
            logger.info("task_id=%s already done; not run again", envelope.task_id)
            if not claim.replied and claim.result is not None:
                # the first run committed but died before replying
                await self.reply_all(envelope, claim.result, (), encode(claim.result))
            await quietly(message.ack())
        elif claim.status == "stale":
            logger.warning("task_id=%s: our lease is gone; handing the task back", envelope.task_id)
            await self.hand_back(message, envelope, self._lease_delay_ms())
        elif claim.status == "busy":
            await self.defer(message, envelope, claim.detail)
        else:
            logger.info("task_id=%s not run: %s %s", envelope.task_id, claim.status, claim.detail)
            await quietly(message.ack())

    async def defer(
        self, message: AbstractIncomingMessage, envelope: TaskEnvelope, holder: str
    ) -> None:
        """Another instance holds the claim: look again later, through a retry delay queue.

        Either the holder finishes (the next look finds the result) or its lease lapses
        (the next look takes the claim over). Acking instead would lose the task if the
        holder is dead but its lease has not run out yet.
        """
        delay = self._lease_delay_ms()
        logger.info(
            "task_id=%s held by %s; looking again in %d ms", envelope.task_id, holder, delay
        )
        await self.hand_back(message, envelope, delay, marker=holder)

    async def outage(self, message: AbstractIncomingMessage, envelope: TaskEnvelope) -> None:
        """Redis or the broker went away while the task was being run or settled (called
        from the ``except``: the error in hand is the outage)."""
        exc = sys.exc_info()[1]
        if exc is not None and self._outages.report(exc, what="settling tasks"):
            # said once per outage by its `mesh.outage.OutageLog`
            logger.debug("task_id=%s: handed back (outage: %s)", envelope.task_id, describe(exc))
        else:
            logger.warning(
                "task_id=%s: transient failure; handed back", envelope.task_id, exc_info=True
            )
        await self.hand_back(message, envelope, self.deps.topology.retry_delays_ms[0])

    async def hand_back(
        self,
        message: AbstractIncomingMessage,
        envelope: TaskEnvelope,
        delay_ms: int,
        *,
        marker: str | None = None,
    ) -> None:
        """Give a delivery back to the agent's queue after `delay_ms`, not at once.

        An immediate requeue comes straight back while the cause lasts (Redis away, every
        lease lapsed in a broker outage): thousands of redeliveries a second, and on a quorum
        queue each one counts toward the delivery limit. The copy goes through
        ``mesh.retry.<delay>`` as a new message (the limit is not touched), marked as handed
        back (``marker``: the holder it waits on, else this instance), so a claim never
        takes it for a first delivery. When even that publish fails
        (the broker is away), the delivery is requeued: the broker redelivers it later.
        """
        delay = nearest_delay(self.deps.topology.retry_delays_ms, delay_ms)
        try:
            headers = {DELAY_HEADER: str(delay), DEFERRED_HEADER: marker or self.deps.instance_id}
            await self._republish(envelope, headers)
        except TRANSIENT_ERRORS:
            await quietly(message.nack(requeue=True))
            return
        await quietly(message.ack())

    def _lease_delay_ms(self) -> int:
        """The retry delay nearest a third of a lease: time for a holder to finish or for
        its lease to lapse."""
        third = int(self.deps.settings.lease_ttl_s * 1000 / 3)
        return nearest_delay(self.deps.topology.retry_delays_ms, third)

    async def frozen(
        self, message: AbstractIncomingMessage, envelope: TaskEnvelope, holder: Holder
    ) -> None:
        """The handler made no progress for the processing timeout (`mesh.worker.watchdog`):
        the claim is released (the handler, should it wake, commits nothing and applies no
        effect) and the task handed back to the agent's queue for another instance."""
        await self._give_back(message, envelope, holder, "frozen: processing timeout")

    async def stopping(
        self, message: AbstractIncomingMessage, envelope: TaskEnvelope, holder: Holder
    ) -> None:
        """The worker stops and its grace is over (or a second Ctrl-C came): the handler was
        cancelled, the claim is released (fencing keeps a late commit out) and the task goes
        back to this agent's own queue, as a frozen one does: not to a router, which would
        exclude the agent, but to wait for another instance or the restarted one."""
        await self._give_back(message, envelope, holder, "handed back: the worker stopped")

    async def _give_back(
        self, message: AbstractIncomingMessage, envelope: TaskEnvelope, holder: Holder, note: str
    ) -> None:
        deps = self.deps
        await deps.store.release(envelope.task_id, holder, by=deps.instance_id, note=note)
        await self.hand_back(message, envelope, 0, marker=deps.instance_id)

    async def broken(self, message: AbstractIncomingMessage, envelope: TaskEnvelope) -> None:
        """A bug in settling must not wedge the instance: the delivery is settled anyway
        (dead-lettered back to a router, which ends or reroutes the task)."""
        logger.critical(
            "task_id=%s: settling failed; the delivery is rejected",
            envelope.task_id,
            exc_info=True,
        )
        await quietly(message.nack(requeue=False))

    # --- the outcome of a run ---------------------------------------------------------------
    async def settle(
        self,
        message: AbstractIncomingMessage,
        envelope: TaskEnvelope,
        outcome: Outcome,
        timings: dict[str, float],
        holder: Holder,
    ) -> Result | None:
        """Carry out `outcome` for a task `holder` claimed; returns the Result sent, if any.

        Terminal outcomes are committed with the fencing check (one Lua step); only a commit
        that succeeds answers the callers, so a stale instance never double-answers.
        """
        deps = self.deps
        store, by = deps.store, deps.instance_id
        if outcome.kind == "reject":
            logger.info("task_id=%s rejected: %s", envelope.task_id, outcome.message)
            await store.release(envelope.task_id, holder, "rerouting", by=by, note=outcome.message)
            await self._emit(envelope, "rerouting", {"rejected": outcome.message[:500]})
            await quietly(message.reject(requeue=False))
            return None
        if outcome.kind == "retry" and envelope.attempt < deps.settings.max_retries:
            await self._retry(message, envelope, outcome, holder)
            return None
        ids = {"agent_id": deps.agent_id, "instance_id": deps.instance_id}
        result = terminal_result(envelope, outcome, timings, **ids)
        dead: tuple[DeadReason, bytes, dict[str, Any]] | None = None
        if outcome.kind == "retry":
            dead = ("retries", encode(envelope), dict(result.error.details if result.error else {}))
        elif outcome.kind == "expired" and outcome.code == "expired_in_queue":
            dead = ("expired", message.body, outcome.details)
        try:
            commit = await self._commit(result, holder)
        except TRANSIENT_ERRORS:
            raise
        except Exception as exc:
            if result.status != "completed":
                raise
            # an output `check_output` let through but the codec or Redis refused: the caller
            # gets a failed Result saying so, and the delivery is settled as usual
            logger.error("task_id=%s: output not stored", envelope.task_id, exc_info=True)
            result = unstorable_result(envelope, exc, timings, **ids)
            commit = await self._commit(result, holder)
        self._outages.redis.back()
        if commit.status == "stale":
            # our lease lapsed and the claim may be someone else's: hand the message back; the
            # next claim decides (a live holder finishes it, a done task is not run again)
            logger.warning(
                "task_id=%s: result refused (stale token); handed back", envelope.task_id
            )
            await self.hand_back(message, envelope, self._lease_delay_ms())
            return None
        if commit.status != "ok":
            logger.info("task_id=%s: result not stored (%s)", envelope.task_id, commit.status)
            await quietly(message.ack())
            return None
        if dead is not None:
            reason, body, details = dead
            if await deps.publisher.dead_letter(
                reason, body, details=details, task_id=envelope.task_id
            ):
                self.hooks.dead_lettered(reason)
        await self.deliver(envelope, result, commit.waiters, commit.body)
        await quietly(message.ack())
        return result

    async def _retry(
        self,
        message: AbstractIncomingMessage,
        envelope: TaskEnvelope,
        outcome: Outcome,
        holder: Holder,
    ) -> None:
        deps = self.deps
        attempt = envelope.attempt + 1
        asked = outcome.delay_ms
        # a delay queue at least as long as asked (`Retry`'s docstring), else the longest
        delay = nearest_delay(deps.topology.retry_delays_ms, asked or 0)
        if asked is None:
            delay = deps.topology.retry_delay_for(attempt)
        retried = envelope.model_copy(update={"attempt": attempt})
        # the copy goes out (confirmed) before the claim is released and the original
        # acked: a crash in between leaves a duplicate, which the claim absorbs
        await self._republish(
            retried, {DELAY_HEADER: str(delay), LAST_ERROR_HEADER: outcome.message[:1000]}
        )
        await deps.store.release(
            envelope.task_id, holder, "retrying", by=deps.instance_id, note=outcome.message
        )
        await quietly(message.ack())
        self.hooks.retried(deps.agent_id)
        data: dict[str, Any] = {"attempt": attempt, "delay_ms": delay}
        rounded = ""
        if asked is not None and asked != delay:
            data["requested_delay_ms"] = asked
            rounded = f" (asked {asked} ms: the nearest delay queue, MESH_RETRY_DELAYS_MS)"
        data["error"] = outcome.message[:500]
        await self._emit(envelope, "retrying", data)
        logger.info(
            "task_id=%s retry %d in %d ms%s: %s",
            envelope.task_id,
            attempt,
            delay,
            rounded,
            outcome.message,
        )

    async def _republish(self, envelope: TaskEnvelope, headers: dict[str, str]) -> None:
        """Send `envelope` back to this agent's queue through the retry exchange, waiting
        ``headers[DELAY_HEADER]`` ms in its delay queue (confirmed)."""
        topology = self.deps.topology
        publisher = self.deps.publisher
        exchange = await publisher.exchange(topology.retry)
        key = topology.retry_key(int(headers[DELAY_HEADER]), self.deps.agent_id, envelope.priority)
        await with_retries(
            lambda: publisher.send(
                exchange, envelope_message(envelope, headers=headers), key, mandatory=False
            )
        )

    async def _commit(self, result: Result, holder: Holder) -> Commit:
        return await self.deps.store.finish(
            result,
            result.status,
            by=self.deps.instance_id,
            holder=holder,
            note=result.error.code if result.error else "",
            agent_id=self.deps.agent_id,
            # under access control a router answers the callers (`ResultForwarder`), with
            # the copy sealed under this agent's own keys
            with_waiters=self.answers.with_waiters,
            seal=self.answers.seal,
        )

    # --- answers ------------------------------------------------------------------------------
    async def reply_all(
        self,
        envelope: TaskEnvelope,
        result: Result,
        waiters: Iterable[str],
        body: bytes,
    ) -> None:
        """Send `result` (`body`: it encoded) to every recorded reply_to of the task
        (and the envelope's own), or, under access control, have a router forward it
        (`mesh.worker.answers`)."""
        await self.answers.answer(envelope, result, waiters, body)

    async def deliver(
        self,
        envelope: TaskEnvelope,
        result: Result,
        waiters: Iterable[str],
        body: bytes,
    ) -> None:
        """Send the terminal Result of a task to its callers and record the event."""
        await self.reply_all(envelope, result, waiters, body)
        if result.status == "completed":
            self.completed += 1
        route = envelope.route
        self.hooks.ended(
            result.status,
            self.deps.agent_id,
            route.strategy if route is not None else "",
            envelope.created_ms,
        )
        event_type = f"task.{result.status}"
        await self.deps.publisher.emit(
            Event(
                type=event_type,
                trace_id=envelope.trace_id,
                task_id=envelope.task_id,
                agent_id=self.deps.agent_id,
                instance_id=self.deps.instance_id,
                data={"error": result.error.code if result.error else None},
            ),
            event_routing_key(event_type, route.router if route is not None else None),
        )

    async def _emit(self, envelope: TaskEnvelope, state: str, data: dict[str, Any]) -> None:
        await emit_states(
            self.deps.publisher,
            (state,),
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            agent_id=self.deps.agent_id,
            instance_id=self.deps.instance_id,
            data=data,
            router=envelope.route.router if envelope.route is not None else None,
        )


__all__ = ["Settler"]
