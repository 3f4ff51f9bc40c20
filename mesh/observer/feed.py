"""`EventFeed`: the observer's durable, bounded queue on the events exchange.

The queue is `Topology.observer_queue` (``<ns>.observer.<user>.<name>``, the name the
observer role may declare), bound to ``#`` and capped by ``x-max-length`` with
``drop-head``: an observer that falls behind loses its oldest events, and publishers are
never slowed. Each delivery (one event, or a batch of one routing key) is acked once
handled (an outage requeues it, a batch whole), through a `mesh.wire.Subscriber`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aio_pika.abc import AbstractIncomingMessage

from mesh.connection import MeshConnection
from mesh.lifecycle import Lifecycle
from mesh.messaging import login_of
from mesh.retrying import quietly
from mesh.schemas import Event, InvalidEnvelope, encode
from mesh.topology import ALL_EVENTS, OBSERVED_EVENTS, declare_spec
from mesh.wire import AckAfter, Subscriber, each_event, is_batch

logger = logging.getLogger(__name__)

#: called with each event, its bytes (as they travelled; an event of a batch: its own
#: encoding, the same bytes) and the publisher's broker user
Sink = Callable[[Event, bytes, str | None], Awaitable[None]]


class EventFeed(Lifecycle):
    """The observer's queue, consumed into `sink`; off (`disabled`) if its user may not."""

    def __init__(self, conn: MeshConnection, sink: Sink) -> None:
        self.conn = conn
        self.sink = sink
        self.unreadable = 0
        settings = conn.settings
        # under access control the grant binds only events without request texts
        # (docs/security.md), unless MESH_OBSERVER_READS_REQUESTS allows them
        narrow = settings.access_control and not settings.observer_reads_requests
        self.spec = conn.topology.observer_spec(
            login_of(settings),
            settings.observer_name,
            settings.observer_queue_max_length,
            OBSERVED_EVENTS if narrow else ALL_EVENTS,
        )
        self.subscriber = Subscriber(
            conn,
            self.queue_name,
            each_event(self.handle, unreadable=self._unreadable),
            AckAfter("observer events"),
            prefetch=settings.prefetch,
            optional=True,
        )

    @property
    def queue_name(self) -> str:
        return self.spec.queues[0].name

    async def start(self) -> None:
        """Declare the mesh topology (or check it, in passive mode) and this observer's
        own queue (always: it is the observer's), then consume it."""
        if self.subscriber.started:
            return
        channel = await self.conn.channel(confirms=False)
        try:
            await self.conn.topology.declare(channel)
            await declare_spec(channel, self.spec)
        finally:
            if not channel.is_closed:
                await quietly(channel.close())
        await self.subscriber.start()

    @property
    def disabled(self) -> str | None:
        """Why the feed is off (this user may not read its queue), else None."""
        return self.subscriber.disabled

    async def close(self) -> None:
        await self.subscriber.close()

    async def handle(self, event: Event, message: AbstractIncomingMessage) -> None:
        raw = encode(event) if is_batch(message) else message.body
        await self.sink(event, raw, message.user_id)

    def _unreadable(self, message: AbstractIncomingMessage, exc: InvalidEnvelope) -> None:
        self.unreadable += 1
        logger.debug("unreadable event on %s skipped", message.routing_key)


__all__ = ["EventFeed", "Sink"]
