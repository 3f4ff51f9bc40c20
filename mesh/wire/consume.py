"""`Subscriber`: the one way a mesh process consumes a queue.

A subscriber opens a channel of its own, gets its queue (by name, passively, which is what a
robust channel restores after a reconnect; or through a declare function, for server-named,
exclusive or bound queues) and runs every delivery through one pipeline::

    policy.received(message) -> handle(message) -> policy.done(message)
                                               \\-> policy.outage(message, exc)  (TRANSIENT_ERRORS)
                                               \\-> policy.broken(message, exc)  (anything else)
                                               \\-> policy.cancelled(message), re-raised

The settle policy is the only code of a subscriber that acks or nacks (habit 7): `NoAck`
(the broker settles on delivery), `AckAfter` (ack once handled), `AckBatched` (the same,
through one `AckBatcher`), `Manual` (the handler settles; the subscriber only settles what
the handler could not), or any object of the `SettlePolicy` protocol the caller brings.

A user that may not consume the queue either fails `start()` (the default) or, for an
``optional`` subscriber, leaves it off (`Subscriber.disabled`) with an error log naming
the fix, and the process keeps running.

A consumer of the events exchange hands its handler to `each_event`: a delivery there is
one `Event` or, marked ``x-mesh-batch``, an `EventBatch` of one routing key
(`mesh.event_batch`), and `events_of` is the one decoder of both.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Protocol

import aio_pika.exceptions
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.acks import AckBatcher
from mesh.connection import MeshConnection
from mesh.errors import NotStarted
from mesh.lifecycle import Lifecycle
from mesh.messaging import login_of
from mesh.outage import connection_failure
from mesh.retrying import TRANSIENT_ERRORS, quietly
from mesh.schemas import Event, EventBatch, InvalidEnvelope, decode
from mesh.topology import BATCH_HEADER

logger = logging.getLogger(__name__)

#: handles one delivery; raising reports an outage (`TRANSIENT_ERRORS`) or a bug
Handler = Callable[[AbstractIncomingMessage], Awaitable[None]]
#: declares (or looks up) the queue on the subscriber's channel
Declare = Callable[[AbstractChannel], Awaitable[AbstractQueue]]
#: what a policy does with a body that cannot be handled (a bug), instead of rejecting it
BugAction = Callable[[AbstractIncomingMessage, Exception], Awaitable[None]]
#: handles one event of a delivery (its routing key and publisher's ``user_id`` are the
#: delivery's, shared by every event of a batch)
EventHandler = Callable[[Event, AbstractIncomingMessage], Awaitable[None]]
#: told of a delivery on the events exchange that is neither an event nor a batch
Unreadable = Callable[[AbstractIncomingMessage, InvalidEnvelope], object]

#: what a consumer cancel may meet on a channel that is going or gone (nothing to do then)
_CANCEL_ERRORS = (*TRANSIENT_ERRORS, aio_pika.exceptions.AMQPError, RuntimeError)

#: how long an ack or nack may wait: on a channel that is gone (a robust one waits for its
#: reconnect) it must not hold a handler, and so a shutdown, for ever
SETTLE_TIMEOUT_S = 5.0

#: the first hold before an outage's requeue, doubling with each outage in a row
OUTAGE_BACKOFF_S = 0.05
#: the longest hold before an outage's requeue
OUTAGE_BACKOFF_MAX_S = 2.0
#: how long `held_through_outages` keeps one delivery, retrying it in place, before its
#: outage requeues it: on a quorum queue (RabbitMQ before 4.3) every requeue counts against
#: the queue's delivery limit, which a requeue per backoff spends within seconds (one
#: leader election), and the broker then drops the message
OUTAGE_HOLD_S = 30.0


async def settle_quietly(action: Awaitable[object]) -> bool:
    """Await an ack or nack for at most `SETTLE_TIMEOUT_S`; False when its channel was lost
    (the broker then redelivers the message, which is what an unsettled delivery needs)."""
    try:
        return await asyncio.wait_for(quietly(action), SETTLE_TIMEOUT_S)
    except TimeoutError:
        logger.info("ack/nack still waiting on its channel after %.0fs; skipped", SETTLE_TIMEOUT_S)
        return False


def is_batch(message: AbstractIncomingMessage) -> bool:
    """Does the delivery carry an `EventBatch` (``x-mesh-batch``), not one event?"""
    return BATCH_HEADER in (message.headers or {})


def events_of(message: AbstractIncomingMessage) -> list[Event]:
    """The events one delivery of the events exchange carries, oldest first: the event
    itself, or every event of its batch.

    Raises:
        InvalidEnvelope: the body is not an `Event`, nor, with ``x-mesh-batch``, an
            `EventBatch` (a batch is read whole or not at all).
    """
    if is_batch(message):
        return decode(EventBatch, message.body).events
    return [decode(Event, message.body)]


def each_event(handle: EventHandler, *, unreadable: Unreadable | None = None) -> Handler:
    """A subscriber's handler that gives `handle` each event of a delivery in turn (one,
    or a batch's, `events_of`); an unreadable body goes to `unreadable` (else it is
    skipped). An outage or bug `handle` raises ends the delivery there, as the policy
    says: a requeued batch comes back whole."""

    async def on_message(message: AbstractIncomingMessage) -> None:
        try:
            events = events_of(message)
        except InvalidEnvelope as exc:
            if unreadable is not None:
                unreadable(message, exc)
            return
        for event in events:
            await handle(event, message)

    return on_message


class SettlePolicy(Protocol):
    """What becomes of a delivery at each end of the pipeline (the only code that settles)."""

    #: what the subscriber consumes, for logs ("result notices", "tasks")
    what: str
    #: consume with ``no_ack=True``: the broker settles every delivery as it sends it
    no_ack: bool

    def received(self, message: AbstractIncomingMessage) -> None:
        """A delivery arrived (before it is handled)."""

    async def done(self, message: AbstractIncomingMessage) -> None:
        """The handler returned."""

    async def outage(self, message: AbstractIncomingMessage, exc: BaseException) -> None:
        """The handler raised one of `TRANSIENT_ERRORS` (the broker or Redis is away)."""

    async def broken(self, message: AbstractIncomingMessage, exc: Exception) -> None:
        """The handler raised anything else: a bug, or a body it cannot handle."""

    async def cancelled(self, message: AbstractIncomingMessage) -> None:
        """The handler was cancelled (shutdown); the subscriber re-raises afterwards."""

    async def drain(self) -> None:
        """Send what is pending (the subscriber is closing)."""


class OutageBackoff:
    """The hold before requeueing a delivery an outage stopped: growing while it lasts.

    An immediate requeue comes straight back while Redis or the broker is away; holding it
    a moment (longer with each outage in a row, jittered) keeps a consumer from spinning
    on its own queue. This is the one bounded sleep a consumer may take (anti-pattern 4).
    """

    def __init__(
        self, first_s: float = OUTAGE_BACKOFF_S, max_s: float = OUTAGE_BACKOFF_MAX_S
    ) -> None:
        self.first_s = first_s
        self.max_s = max_s
        #: outages in a row (reset by a delivery handled)
        self.outages = 0

    def next_s(self) -> float:
        """Count one more outage; how long to hold the delivery before requeueing it."""
        self.outages += 1
        delay = min(self.max_s, self.first_s * 2.0 ** min(self.outages, 8))
        return delay * random.uniform(0.5, 1.0)

    def reset(self) -> None:
        self.outages = 0


def channel_open(message: AbstractIncomingMessage) -> bool:
    """Is the channel `message` came on still open (can it still be settled)?"""
    try:
        return not message.channel.is_closed
    except aiormq.exceptions.ChannelInvalidStateError:
        return False


async def held_through_outages(
    attempt: Callable[[bool], Awaitable[None]],
    message: AbstractIncomingMessage,
    backoff: OutageBackoff,
    *,
    what: str,
    hold_s: float = OUTAGE_HOLD_S,
) -> None:
    """Run ``attempt(again)`` (``again``: False the first time) until it ends without an
    outage, holding `message` meanwhile: after each outage it waits `backoff`'s next delay
    and tries again in place, as a redelivery would, while the message's channel is open
    and for at most `hold_s`. Then the outage is raised, for the settler to requeue.

    The handler of a delivery that must not spend its queue's delivery limit on outages
    (the router's) runs through this; a lost channel raises at once (the broker returns
    the message itself)."""
    end = asyncio.get_running_loop().time() + hold_s
    again = False
    while True:
        try:
            await attempt(again)
        except TRANSIENT_ERRORS as exc:
            delay = backoff.next_s()
            if asyncio.get_running_loop().time() + delay > end or not channel_open(message):
                raise
            level = logging.DEBUG if again or connection_failure(exc) else logging.WARNING
            logger.log(level, "%s: one held through an outage (%r); retried in place", what, exc)
            await asyncio.sleep(delay)
            if not channel_open(message):  # closed meanwhile (a shutdown): the broker has it
                raise
            again = True
        else:
            if again:
                backoff.reset()
            return


class NoAck:
    """The broker settles on delivery: an outage or a bug loses the message (logged)."""

    no_ack = True

    def __init__(self, what: str = "messages") -> None:
        self.what = what

    def received(self, message: AbstractIncomingMessage) -> None:
        return None

    async def done(self, message: AbstractIncomingMessage) -> None:
        return None

    async def outage(self, message: AbstractIncomingMessage, exc: BaseException) -> None:
        # a lost broker or Redis is said once by its `mesh.outage.OutageLog`
        level = logging.DEBUG if connection_failure(exc) else logging.WARNING
        logger.log(level, "%s: one not handled (outage: %r); lost", self.what, exc)

    async def broken(self, message: AbstractIncomingMessage, exc: Exception) -> None:
        logger.error(
            "%s from user %r: handling failed; dropped", self.what, message.user_id, exc_info=exc
        )

    async def cancelled(self, message: AbstractIncomingMessage) -> None:
        return None

    async def drain(self) -> None:
        return None


class AckAfter:
    """Ack once handled; an outage requeues after `OutageBackoff`; a bug rejects.

    `on_bug` replaces the reject: the body is handed to it (answer its reply_to,
    dead-letter it) and then acked. Should `on_bug` meet an outage itself, the delivery is
    requeued instead; should it fail otherwise, the delivery is rejected.
    """

    no_ack = False

    def __init__(
        self,
        what: str = "messages",
        *,
        on_bug: BugAction | None = None,
        backoff: OutageBackoff | None = None,
    ) -> None:
        self.what = what
        self.on_bug = on_bug
        self.backoff = backoff or OutageBackoff()
        #: deliveries an outage sent back, and bodies a bug stopped
        self.outages = 0
        self.bugs = 0

    def received(self, message: AbstractIncomingMessage) -> None:
        return None

    async def done(self, message: AbstractIncomingMessage) -> None:
        self.backoff.reset()
        await self.ack(message)

    async def outage(self, message: AbstractIncomingMessage, exc: BaseException) -> None:
        self.outages += 1
        delay = self.backoff.next_s()
        if connection_failure(exc):  # said once by its `mesh.outage.OutageLog`
            logger.debug("%s: not handled (outage: %r); requeued in %.2fs", self.what, exc, delay)
        else:
            logger.warning(
                "%s: not handled (outage: %r); requeued in %.2fs",
                self.what,
                exc,
                delay,
                exc_info=exc,
            )
        await asyncio.sleep(delay)
        await self.nack(message, requeue=True)

    async def broken(self, message: AbstractIncomingMessage, exc: Exception) -> None:
        self.bugs += 1
        if self.on_bug is None:
            logger.error(
                "%s from user %r failed; rejected", self.what, message.user_id, exc_info=exc
            )
            await self.nack(message, requeue=False)
            return
        logger.critical(
            "%s from user %r failed; handed to %s",
            self.what,
            message.user_id,
            getattr(self.on_bug, "__qualname__", "on_bug"),
            exc_info=exc,
        )
        try:
            await self.on_bug(message, exc)
        except TRANSIENT_ERRORS as bug_exc:
            logger.warning(
                "%s: bug action hit an outage; requeued",
                self.what,
                exc_info=None if connection_failure(bug_exc) else bug_exc,
            )
            await self.nack(message, requeue=True)
            return
        except Exception:
            logger.critical("%s: bug action failed; rejected", self.what, exc_info=True)
            await self.nack(message, requeue=False)
            return
        await self.ack(message)

    async def cancelled(self, message: AbstractIncomingMessage) -> None:
        await self.nack(message, requeue=True)

    async def drain(self) -> None:
        return None

    # --- the AMQP actions (what `AckBatched` changes) ---------------------------------------
    async def ack(self, message: AbstractIncomingMessage) -> None:
        await settle_quietly(message.ack())

    async def nack(self, message: AbstractIncomingMessage, *, requeue: bool) -> None:
        await settle_quietly(message.nack(requeue=requeue))


class AckBatched(AckAfter):
    """`AckAfter`, with the acks of a concurrent consumer sent in batches (`AckBatcher`),
    drained when the subscriber closes."""

    def __init__(
        self,
        what: str = "messages",
        *,
        on_bug: BugAction | None = None,
        backoff: OutageBackoff | None = None,
    ) -> None:
        super().__init__(what, on_bug=on_bug, backoff=backoff)
        self.batcher = AckBatcher()

    def received(self, message: AbstractIncomingMessage) -> None:
        self.batcher.received(message)

    async def ack(self, message: AbstractIncomingMessage) -> None:
        self.batcher.ack(message)

    async def nack(self, message: AbstractIncomingMessage, *, requeue: bool) -> None:
        self.batcher.settled(message)
        await settle_quietly(message.nack(requeue=requeue))

    async def drain(self) -> None:
        await self.batcher.drain()


class Manual(AckAfter):
    """The handler settles each delivery itself (a settler of its own): nothing is acked
    here; an outage, a bug or a cancel before the handler settled is settled as by
    `AckAfter`."""

    async def done(self, message: AbstractIncomingMessage) -> None:
        self.backoff.reset()


class Subscriber(Lifecycle):
    """Consumes one queue on a channel of its own: ``async with Subscriber(...) as sub:``.

    `queue` is a queue name (looked up passively: the queue must exist) or a `Declare`
    function. `stop()` cancels the consumer and keeps the channel (a drain lets in-flight
    deliveries settle); `close()` stops, drains the policy and closes the channel.
    """

    def __init__(
        self,
        conn: MeshConnection,
        queue: str | Declare,
        handle: Handler,
        policy: SettlePolicy,
        *,
        prefetch: int | None = None,
        optional: bool = False,
    ) -> None:
        self.conn = conn
        self.source = queue
        self.handle = handle
        self.policy = policy
        #: None: the channel's default (unbounded)
        self.prefetch = prefetch
        #: a user that may not consume the queue leaves the subscriber off, not raising
        self.optional = optional
        #: why this subscriber is off (its user may not consume the queue), else None
        self.disabled: str | None = None
        self.delivered = 0
        self._channel: AbstractChannel | None = None
        self._queue: AbstractQueue | None = None
        self._tag: str | None = None

    @property
    def what(self) -> str:
        return self.policy.what

    @property
    def channel(self) -> AbstractChannel:
        """The subscriber's own channel (an RPC answers through it, a client deletes its
        reply queue with it)."""
        if self._channel is None:
            raise NotStarted(f"the subscriber of {self.what} was not started")
        return self._channel

    @property
    def queue(self) -> AbstractQueue:
        if self._queue is None:
            raise NotStarted(f"the subscriber of {self.what} was not started")
        return self._queue

    @property
    def started(self) -> bool:
        """Between a `start` that consumed and `close` (a `disabled` one is not)."""
        return self._queue is not None

    @property
    def consuming(self) -> bool:
        """Started and not stopped."""
        return self._tag is not None

    async def start(self) -> Subscriber:
        """Open the channel, get the queue, consume; a second call does nothing.

        Raises:
            aiormq.exceptions.ChannelAccessRefused: this user may not read the queue (unless
                the subscriber is ``optional``: it is then `disabled`).
        """
        if self._queue is not None:
            return self
        self.disabled = None
        channel = self._channel = await self.conn.channel(confirms=False, prefetch=self.prefetch)
        try:
            if isinstance(self.source, str):
                # passive declare (not ensure=False): a robust channel only restores the
                # consumers of queues it declared, so this is what survives a broker restart
                queue = await channel.get_queue(self.source, ensure=True)
            else:
                queue = await self.source(channel)
            self._tag = await queue.consume(self._on_message, no_ack=self.policy.no_ack)
        except aiormq.exceptions.ChannelAccessRefused as exc:
            await self._close_channel()
            if not self.optional:
                raise
            self.disabled = str(exc)
            logger.error(
                "%s are off: user %r may not consume %s (%s); grant it (re-run "
                "`mesh access provision`) and restart",
                self.what,
                login_of(self.conn.settings),
                self.source if isinstance(self.source, str) else "its queue",
                exc,
            )
            return self
        except BaseException:
            await self._close_channel()
            raise
        self._queue = queue
        return self

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        """The pipeline: every delivery ends in exactly one policy call after `received`."""
        self.delivered += 1
        policy = self.policy
        policy.received(message)
        try:
            await self.handle(message)
        except asyncio.CancelledError:
            await policy.cancelled(message)
            raise
        except TRANSIENT_ERRORS as exc:
            self.conn.outages.report(exc, what=self.what)
            await policy.outage(message, exc)
        except Exception as exc:
            await policy.broken(message, exc)
        else:
            await policy.done(message)

    async def stop(self) -> None:
        """Stop taking deliveries; those in hand go on and settle on the open channel."""
        tag, self._tag = self._tag, None
        if self._queue is not None and tag is not None:
            with contextlib.suppress(*_CANCEL_ERRORS):
                await self._queue.cancel(tag)

    async def close(self) -> None:
        """`stop`, send the policy's pending acks, close the channel; safe to call twice."""
        await self.stop()
        if self._queue is not None:
            await self.policy.drain()
        self._queue = None
        await self._close_channel()

    async def _close_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            await quietly(channel.close())


__all__ = [
    "OUTAGE_BACKOFF_MAX_S",
    "OUTAGE_BACKOFF_S",
    "OUTAGE_HOLD_S",
    "SETTLE_TIMEOUT_S",
    "AckAfter",
    "AckBatched",
    "BugAction",
    "Declare",
    "EventHandler",
    "Handler",
    "Manual",
    "NoAck",
    "OutageBackoff",
    "SettlePolicy",
    "Subscriber",
    "Unreadable",
    "channel_open",
    "each_event",
    "events_of",
    "held_through_outages",
    "is_batch",
    "settle_quietly",
]
