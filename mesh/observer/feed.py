"""`EventFeed`: the observer's durable, bounded queue on the events exchange.

The queue is `Topology.observer_queue` (``<ns>.observer.<user>.<name>``, the name the
observer role may declare), bound to ``#`` and capped by ``x-max-length`` with
``drop-head``: an observer that falls behind loses its oldest events, and publishers are
never slowed. Consumption is `QueueConsumer`'s (ack after handling, requeue on an outage).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aio_pika.abc import AbstractIncomingMessage

from mesh.connection import MeshConnection
from mesh.messaging import login_of
from mesh.retrying import quietly
from mesh.router.consumer import QueueConsumer
from mesh.topology import declare_spec
from schemas import Event, InvalidEnvelope, decode

logger = logging.getLogger(__name__)

#: called with each event, its bytes as they travelled and the publisher's broker user
Sink = Callable[[Event, bytes, str | None], Awaitable[None]]


class EventFeed(QueueConsumer):
    what = "observer events"

    def __init__(self, conn: MeshConnection, sink: Sink) -> None:
        super().__init__(conn)
        self.sink = sink
        self.unreadable = 0
        settings = conn.settings
        self.spec = conn.topology.observer_spec(
            login_of(settings), settings.observer_name, settings.observer_queue_max_length
        )

    @property
    def queue_name(self) -> str:
        return self.spec.queues[0].name

    async def start(self) -> None:
        """Declare the mesh topology (or check it, in passive mode) and this observer's
        own queue (always: it is the observer's), then consume it."""
        if self._queue is not None:
            return
        channel = await self.conn.channel(confirms=False)
        try:
            await self.conn.topology.declare(channel)
            await declare_spec(channel, self.spec)
        finally:
            if not channel.is_closed:
                await quietly(channel.close())
        await super().start()

    async def handle(self, message: AbstractIncomingMessage) -> None:
        try:
            event = decode(Event, message.body)
        except InvalidEnvelope:
            self.unreadable += 1
            logger.debug("unreadable event on %s skipped", message.routing_key)
            return
        await self.sink(event, message.body, message.user_id)


__all__ = ["EventFeed", "Sink"]
