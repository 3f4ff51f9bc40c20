"""`QueueConsumer`: the shape of a router's side consumers (result notices, feedback).

One queue of the static topology, consumed on a channel of its own; each message is
handled, then acked; an outage requeues it; a bug drops it (logged) so it cannot hold a
prefetch slot for ever. A router user that may not read the queue (provisioned before the
queue existed) keeps routing: the consumer is off, logged as an error naming the fix.
"""

from __future__ import annotations

import logging

import aiormq.exceptions
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.lifecycle import Lifecycle
from mesh.retrying import TRANSIENT_ERRORS, quietly

logger = logging.getLogger(__name__)


class QueueConsumer(Lifecycle):
    """Subclasses name `what` they consume, their `queue_name`, and `handle` a message."""

    what = "messages"

    def __init__(self, conn: MeshConnection) -> None:
        self.conn = conn
        #: why this consumer is off (its user may not read the queue), else None
        self.disabled: str | None = None
        self._queue: AbstractQueue | None = None
        self._tag: str | None = None

    @property
    def queue_name(self) -> str:
        raise NotImplementedError

    async def handle(self, message: AbstractIncomingMessage) -> None:
        raise NotImplementedError

    async def start(self) -> None:
        if self._queue is not None:
            return
        name = self.queue_name
        channel = await self.conn.channel(confirms=False, prefetch=self.conn.settings.prefetch)
        try:
            queue = await channel.get_queue(name, ensure=True)
            self._tag = await queue.consume(self._on_message)
        except aiormq.exceptions.ChannelAccessRefused as exc:
            self.disabled = str(exc)
            logger.error(
                "%s are off: this router's user may not consume %r (%s); grant it (re-run "
                "`mesh access provision`) and restart the router",
                self.what,
                name,
                exc,
            )
            if not channel.is_closed:
                await quietly(channel.close())
            return
        self._queue = queue

    async def close(self) -> None:
        queue, self._queue = self._queue, None
        if queue is not None and self._tag is not None:
            await quietly(queue.cancel(self._tag))
            if not queue.channel.is_closed:
                await queue.channel.close()

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        try:
            await self.handle(message)
        except TRANSIENT_ERRORS:
            logger.warning("%s: not handled (outage); requeued", self.what, exc_info=True)
            await quietly(message.nack(requeue=True))
            return
        except Exception:
            logger.exception("%s from user %r failed; dropped", self.what, message.user_id)
            await quietly(message.nack(requeue=False))
            return
        await quietly(message.ack())


__all__ = ["QueueConsumer"]
