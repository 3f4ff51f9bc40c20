"""How each kind of message is put on the wire: properties, channels, confirms.

Envelopes, results and dead letters go through a channel with publisher confirms and are
persistent. Events and heartbeats are transient and go through a channel without confirms:
they are cheap, and a lost one is superseded by the next. The per-task events (``task.*``,
``route.decision``: `mesh.topology.batched_event`) travel in batches, one message per
routing key and window (`mesh.event_batch`), gathered across every publisher of one
connection (a worker process hosts an agent runtime, and a publisher, per agent); a
publisher's `close` sends what waits.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
import urllib.parse
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractExchange, DeliveryMode
from pamqp.commands import Basic

from mesh.connection import MeshConnection
from mesh.errors import NotStarted, PublishNacked
from mesh.event_batch import EventBatcher
from mesh.lifecycle import Lifecycle
from mesh.retrying import TRANSIENT_ERRORS
from mesh.schemas import Event, Result, TaskEnvelope, batch_body, encode
from mesh.schemas.codec import dumps
from mesh.topology import (
    BATCH_HEADER,
    DETAILS_HEADER,
    INVALID_KEEP_BYTES,
    REASON_HEADER,
    SHA256_HEADER,
    SIZE_HEADER,
    TRUNCATED_HEADER,
    DeadReason,
    batched_event,
    message_priority,
)
from mesh.tracing import tracing_for

if TYPE_CHECKING:
    from mesh.tracing.spans import Tracing

logger = logging.getLogger(__name__)

JSON = "application/json"

#: alert a component emits when the broker refused one of its dead letters (a full
#: ``<ns>.dead.<reason>`` under reject-publish): the message was dropped, not requeued
DROPPED_ALERT = "alert.dead_letter_dropped"
#: at most one WARNING line and one `DROPPED_ALERT` per reason in this many seconds
DROP_REPORT_S = 60.0
#: a nacked dead letter is tried this often before it counts as refused (dropped)
DEAD_LETTER_NACK_TRIES = 3
DEAD_LETTER_NACK_PAUSE_S = 0.05
#: what may keep a `DROPPED_ALERT` from going out (the drop is counted and logged anyway)
_ALERT_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, aiormq.exceptions.AMQPError)
#: what may keep the events that wait from going out at `Publisher.close`
_FLUSH_ERRORS: tuple[type[BaseException], ...] = (TimeoutError, *_ALERT_ERRORS)
#: how long `Publisher.close` may take to send the events that wait (a broker away)
CLOSE_FLUSH_TIMEOUT_S = 5.0


def _no_inject(headers: Any) -> None:
    return None


def login_of(settings: Any) -> str:
    """The broker user this process logs in as (the first AMQP URL's; ``guest`` when the
    URL names none): every mesh publish carries it as ``user_id``, which the broker checks."""
    url = settings.amqp_urls[0].get_secret_value()
    return urllib.parse.unquote(urllib.parse.urlsplit(url).username or "guest")


def envelope_message(
    envelope: TaskEnvelope,
    *,
    expiration_ms: int | None = None,
    headers: Mapping[str, Any] | None = None,
) -> aio_pika.Message:
    """A persistent AMQP message for an envelope; priority = envelope priority."""
    return aio_pika.Message(
        encode(envelope),
        content_type=JSON,
        delivery_mode=DeliveryMode.PERSISTENT,
        priority=message_priority(envelope.priority),
        message_id=envelope.task_id,
        correlation_id=envelope.task_id,
        expiration=None if expiration_ms is None else max(1, expiration_ms) / 1000.0,
        headers=dict(headers or {}),
    )


def result_message(result: Result, correlation_id: str | None = None) -> aio_pika.Message:
    """A persistent Result message; its correlation_id is the caller's, else the task_id."""
    return encoded_result_message(encode(result), result.task_id, correlation_id)


def encoded_result_message(
    body: bytes, task_id: str, correlation_id: str | None = None
) -> aio_pika.Message:
    """`result_message` of a Result encoded already (`body`, the Result of `task_id`: the
    bytes a commit stored, sent as they are)."""
    return aio_pika.Message(
        body,
        content_type=JSON,
        delivery_mode=DeliveryMode.PERSISTENT,
        correlation_id=correlation_id or task_id,
        message_id=f"result:{task_id}",
    )


#: separates a reply queue from the caller's correlation_id in a recorded waiter
_WAITER_SEP = "\x1f"


def waiter(reply_to: str | None, correlation_id: str | None = None) -> str | None:
    """A reply queue and the correlation_id to echo, as one recorded waiter."""
    if not reply_to:
        return None
    return reply_to if not correlation_id else f"{reply_to}{_WAITER_SEP}{correlation_id}"


def waiter_of(envelope: TaskEnvelope) -> str | None:
    """Who waits for `envelope`'s Result, as recorded with the task: its reply queue and,
    when the caller set one, the correlation_id to echo (None: nobody to answer)."""
    return waiter(envelope.reply_to, envelope.correlation_id)


def split_waiter(waiter: str) -> tuple[str, str | None]:
    """``(reply queue, correlation_id or None)`` of a recorded waiter."""
    reply_to, _, correlation_id = waiter.partition(_WAITER_SEP)
    return reply_to, correlation_id or None


class _EventLane:
    """The batches of one connection's events, shared by its open publishers: a window
    gathers the events of all of them, and the oldest open one sends them."""

    def __init__(self, conn: MeshConnection) -> None:
        settings = conn.settings
        self.publishers: list[Publisher] = []
        self.batcher = EventBatcher(
            self._send,
            window_s=settings.event_batch_window_ms / 1000.0,
            max_events=settings.event_batch_max_events,
            on_lost=self.lost,
        )
        # not the connection itself: it is the key of the lane's weak entry in `_LANES`
        self.outages = conn.outages

    async def _send(self, key: str, bodies: Sequence[bytes]) -> None:
        if not self.publishers:
            raise NotStarted("no publisher of this connection is open")
        await self.publishers[0].send_events(key, bodies)

    def lost(self, key: str, count: int, exc: BaseException) -> None:
        if not self.outages.report(exc, what=f"{count} event(s) of {key}"):
            logger.warning("%d event(s) of %s not sent", count, key, exc_info=exc)


#: each connection's `_EventLane`, while one of its publishers is open
_LANES: weakref.WeakKeyDictionary[MeshConnection, _EventLane] = weakref.WeakKeyDictionary()


class Publisher(Lifecycle):
    """Publishes on behalf of one component. `start()` opens its two channels."""

    def __init__(self, conn: MeshConnection) -> None:
        self.conn = conn
        self.topology = conn.topology
        #: stamped as ``user_id`` on every publish (the broker refuses any other)
        self.login = login_of(conn.settings)
        self._confirmed: AbstractChannel | None = None
        self._fast: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._fast_exchanges: dict[str, AbstractExchange] = {}
        #: the component's span hooks, set by `start()` (None: ``MESH_OTEL=off``)
        self.tracing: Tracing | None = None
        #: writes the current hop into a message's headers (nothing without spans)
        self._inject: Callable[[Any], None] = _no_inject
        #: dead letters the broker refused, by reason (`dead_letter`; read by the metrics)
        self.dropped: dict[str, int] = {}
        #: per reason: (monotonic time of the last report, the count it reported)
        self._drop_reported: dict[str, tuple[float, int]] = {}
        #: when each reason last had a letter refused (a full queue is tried once)
        self._last_drop: dict[str, float] = {}
        #: the connection's batches of events, joined by `start` (`emit`)
        self._lane: _EventLane | None = None

    async def start(self) -> None:
        if self._confirmed is not None:
            return
        self.tracing = tracing_for(self.conn.settings, self.conn.name)
        if self.tracing is not None:
            self._inject = self.tracing.inject
        self._confirmed = await self.conn.channel(confirms=True)
        self._fast = await self.conn.channel(confirms=False)
        lane = _LANES.get(self.conn)
        if lane is None:
            lane = _LANES[self.conn] = _EventLane(self.conn)
        lane.publishers.append(self)
        self._lane = lane

    @property
    def batches(self) -> EventBatcher:
        """The batches of per-task events this publisher's connection gathers."""
        if self._lane is None:
            raise NotStarted("Publisher.start() was not awaited")
        return self._lane.batcher

    @property
    def channel(self) -> AbstractChannel:
        if self._confirmed is None:
            raise NotStarted("Publisher.start() was not awaited")
        return self._confirmed

    async def exchange(self, name: str, *, fast: bool = False) -> AbstractExchange:
        cache = self._fast_exchanges if fast else self._exchanges
        found = cache.get(name)
        if found is None:
            channel = self._fast if fast else self._confirmed
            if channel is None:
                raise NotStarted("Publisher.start() was not awaited")
            found = cache[name] = await channel.get_exchange(name, ensure=False)
        return found

    async def send(
        self,
        exchange: AbstractExchange,
        message: aio_pika.Message,
        routing_key: str,
        *,
        mandatory: bool,
        trace: bool = True,
    ) -> None:
        """Every publish of the component goes through here, stamped with its login;
        without `trace`, it names no hop (a batch of events of many hops).

        A nack of a confirmed publish (a quorum queue between leaders, a node going away)
        is raised as `PublishNacked`, a transient error that the callers' retries cover;
        an unroutable mandatory publish stays `PublishError`.
        """
        message.user_id = self.login
        # inside a hop's span the next process continues it (`mesh.tracing`); chosen once
        if trace:
            self._inject(message.headers)
        try:
            await exchange.publish(message, routing_key=routing_key, mandatory=mandatory)
        except aiormq.exceptions.PublishError:
            raise
        except aiormq.exceptions.DeliveryError as exc:
            if isinstance(exc.frame, Basic.Nack):
                raise PublishNacked(f"the broker nacked a publish to {exchange.name!r}") from exc
            raise

    async def publish_envelope(
        self,
        exchange: str,
        routing_key: str,
        envelope: TaskEnvelope,
        *,
        expiration_ms: int | None = None,
        mandatory: bool = True,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        """Publish with confirm; with `mandatory`, an unbound key raises `PublishError`."""
        ex = await self.exchange(exchange)
        message = envelope_message(envelope, expiration_ms=expiration_ms, headers=headers)
        await self.send(ex, message, routing_key, mandatory=mandatory)

    async def reply(self, waiter: str | None, result: Result) -> None:
        """Send `result` to a waiter (`waiter_of`: a reply queue, maybe with the caller's
        correlation_id); never mandatory (a reply is not returned to us). A mesh reply
        queue is reached through the replies exchange, any other through the default one
        (which a router under access control may not write: such callers are refused)."""
        if waiter:
            await self.reply_encoded(waiter, encode(result), result.task_id)

    async def reply_encoded(self, waiter: str | None, body: bytes, task_id: str) -> None:
        """`reply` with a Result encoded already (`body`: the bytes a commit stored, or the
        copy an agent sealed, which a router forwards as stored)."""
        if not waiter:
            return
        reply_to, correlation_id = split_waiter(waiter)
        message = encoded_result_message(body, task_id, correlation_id)
        key = self.topology.reply_key(reply_to)
        if key is not None:
            # a mesh reply queue: through the replies exchange, keyed by the queue
            await self.send(
                await self.exchange(self.topology.replies), message, key, mandatory=False
            )
        else:
            # any other queue (a plain AMQP client's reply_to): the default exchange
            await self.send(self.channel.default_exchange, message, reply_to, mandatory=False)

    async def dead_letter(
        self,
        reason: DeadReason,
        body: bytes,
        *,
        details: Mapping[str, Any] | None = None,
        headers: Mapping[str, Any] | None = None,
        task_id: str | None = None,
    ) -> bool:
        """Put `body`, exactly as received, into `mesh.dead.<reason>` with the reason.

        Returns False when the broker refused it every time (`DEAD_LETTER_NACK_TRIES`): the
        letter is dropped and counted (`dropped`), and the caller settles its message as
        usual. A broker that is away raises (a transient error: the message comes back).

        An invalid body (anyone may publish one) keeps at most `INVALID_KEEP_BYTES`, with
        its full size and SHA-256 in headers, so garbage cannot fill the dead letters.
        """
        ex = await self.exchange(self.topology.dlx)
        all_headers: dict[str, Any] = {REASON_HEADER: reason, **(headers or {})}
        if reason == "invalid":
            all_headers[SIZE_HEADER] = len(body)
            all_headers[SHA256_HEADER] = hashlib.sha256(body).hexdigest()
            if len(body) > INVALID_KEEP_BYTES:
                body = body[:INVALID_KEEP_BYTES]
                all_headers[TRUNCATED_HEADER] = True
        if details:
            all_headers[DETAILS_HEADER] = dumps(dict(details)).decode()[:65_000]
        message = aio_pika.Message(
            body,
            delivery_mode=DeliveryMode.PERSISTENT,
            headers=all_headers,
            message_id=task_id,
            content_type=JSON,
        )
        key = self.topology.dead_key(reason)
        # a queue that refused a letter a moment ago is full: one try, no pauses
        full = time.monotonic() - self._last_drop.get(reason, -DROP_REPORT_S) < 1.0
        for attempt in range(1 if full else DEAD_LETTER_NACK_TRIES):
            try:
                await self.send(ex, message, key, mandatory=False)
                break
            except PublishNacked:
                # a quorum queue between leaders nacks once; a full dead queue under
                # reject-publish nacks every time: raising would requeue the message, which
                # comes back, is refused again, for ever
                if full or attempt + 1 == DEAD_LETTER_NACK_TRIES:
                    await self._dropped(reason, task_id)
                    return False
                await asyncio.sleep(DEAD_LETTER_NACK_PAUSE_S * (attempt + 1))
        logger.info("dead-lettered reason=%s task_id=%s", reason, task_id)
        return True

    async def _dropped(self, reason: DeadReason, task_id: str | None) -> None:
        """Count a dead letter the broker refused; at most once per `DROP_REPORT_S` and
        reason, log one WARNING with the count and emit `DROPPED_ALERT`."""
        total = self.dropped[reason] = self.dropped.get(reason, 0) + 1
        now = self._last_drop[reason] = time.monotonic()
        last = self._drop_reported.get(reason)
        if last is not None and now - last[0] < DROP_REPORT_S:
            return
        last_total = 0 if last is None else last[1]
        self._drop_reported[reason] = (now, total)
        queue = self.topology.dead_queue(reason)
        logger.warning(
            "dead letter dropped: the broker refused it into %s (full under its cap?) "
            "reason=%s task_id=%s dropped=%d (%d since the last report); "
            "see `mesh dlq list %s`",
            queue,
            reason,
            task_id,
            total,
            total - last_total,
            reason,
        )
        alert = Event(
            type=DROPPED_ALERT,
            task_id=task_id,
            data={"reason": reason, "queue": queue, "dropped": total - last_total, "total": total},
        )
        try:
            await self.emit(alert)
        except _ALERT_ERRORS:
            # the drop is counted and logged; an alert is as transient as any event
            logger.warning("could not emit %s", DROPPED_ALERT, exc_info=True)

    async def emit(self, event: Event, routing_key: str | None = None) -> None:
        """Publish an event on `mesh.events` (transient, no confirm); its routing key is its
        type unless given (`mesh.topology.event_routing_key`). A per-task event
        (`mesh.topology.batched_event`) joins the batch of its key, sent when the window
        ends or the batch is full (`mesh.event_batch`); any other goes at once."""
        if self._lane is None:
            raise NotStarted("Publisher.start() was not awaited")
        key = routing_key or event.type
        if batched_event(event.type):
            await self._lane.batcher.add(key, encode(event))
        else:
            await self.send_events(key, (encode(event),))

    async def send_events(self, key: str, bodies: Sequence[bytes]) -> None:
        """One event as itself; more as one `EventBatch` marked `BATCH_HEADER`."""
        ex = await self.exchange(self.topology.events, fast=True)
        if len(bodies) == 1:
            await self.send(
                ex, aio_pika.Message(bodies[0], content_type=JSON), key, mandatory=False
            )
            return
        message = aio_pika.Message(
            batch_body(bodies), content_type=JSON, headers={BATCH_HEADER: len(bodies)}
        )
        await self.send(ex, message, key, mandatory=False, trace=False)

    async def send_fast(self, exchange: str, routing_key: str, body: bytes, **props: Any) -> None:
        """Transient publish without confirm (heartbeats, control messages)."""
        ex = await self.exchange(exchange, fast=True)
        message = aio_pika.Message(body, content_type=JSON, **props)
        await self.send(ex, message, routing_key, mandatory=False)

    async def close(self) -> None:
        """Send the connection's events that wait (for at most `CLOSE_FLUSH_TIMEOUT_S`;
        through another of its publishers while one is open), then close."""
        lane, self._lane = self._lane, None
        if lane is not None:
            await self._leave(lane)
        for attr in ("_confirmed", "_fast"):
            channel = getattr(self, attr)
            setattr(self, attr, None)
            if channel is not None and not channel.is_closed:
                await channel.close()
        self._exchanges.clear()
        self._fast_exchanges.clear()

    async def _leave(self, lane: _EventLane) -> None:
        last = lane.publishers == [self]
        if not last:
            lane.publishers.remove(self)  # the others send from now on
        try:
            if last and (self._fast is None or self._fast.is_closed):
                if dropped := lane.batcher.discard():
                    logger.info("%d event(s) not sent: the connection is closed", dropped)
            else:
                await asyncio.wait_for(lane.batcher.flush(), CLOSE_FLUSH_TIMEOUT_S)
        except _FLUSH_ERRORS as exc:
            lane.lost("(every key)", lane.batcher.discard(), exc)
        finally:
            if last:
                lane.publishers.clear()
                if _LANES.get(self.conn) is lane:
                    del _LANES[self.conn]
