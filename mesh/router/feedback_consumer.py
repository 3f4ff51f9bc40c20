"""`FeedbackConsumer`: under access control a router applies callers' feedback.

A client has no Redis access there (its ACL user may only PING), so `MeshClient.feedback`
and `mesh feedback` publish a `Feedback` message to ``<ns>.feedback`` instead of writing the
example memory themselves. The router that takes it believes nothing in it but the task_id
and the verdict: the broker-validated ``user_id`` must be the task's owner (the client user
whose submission created the task, the ``owner`` field of the task hash, see
`TaskStore.submit`). Anyone else's feedback, an unreadable message, or feedback on a task
without an owner is dropped, counted in `refused` and logged. Accepted feedback runs the
same `give_feedback` as the direct path (the router's Redis user may write the memory) and
emits ``route.feedback`` as the router's user; a task with no routing record (targeted, or
older than 24 h) is counted in `unknown`.

Nothing is answered: the caller returns once its publish was confirmed.
"""

from __future__ import annotations

import logging

import aiormq.exceptions
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.errors import UnknownTask
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.retrying import TRANSIENT_ERRORS, quietly
from mesh.router.feedback import give_feedback
from schemas import Feedback, InvalidEnvelope, decode

logger = logging.getLogger(__name__)


class FeedbackConsumer(Lifecycle):
    """Consumes ``<ns>.feedback``; applies each task owner's feedback."""

    def __init__(self, conn: MeshConnection, publisher: Publisher, store: TaskStore) -> None:
        self.conn = conn
        self.publisher = publisher
        self.store = store
        #: feedback applied (counted or not: a second verdict of the same kind counts once)
        self.applied = 0
        #: feedback not believed: unreadable, or not from the task's owner
        self.refused = 0
        #: feedback of the owner on a task that has no routing record
        self.unknown = 0
        #: why feedback is off on this router (its user may not read the queue), else None
        self.disabled: str | None = None
        self._queue: AbstractQueue | None = None
        self._tag: str | None = None

    async def start(self) -> None:
        """Consume the feedback queue. A router user provisioned without read on it (users
        provisioned before the queue existed) keeps routing: feedback is then off, which
        is logged as an error naming the fix."""
        if self._queue is not None:
            return
        name = self.conn.topology.feedback
        channel = await self.conn.channel(confirms=False, prefetch=self.conn.settings.prefetch)
        try:
            queue = await channel.get_queue(name, ensure=True)
            self._tag = await queue.consume(self._on_feedback)
        except aiormq.exceptions.ChannelAccessRefused as exc:
            self.disabled = str(exc)
            logger.error(
                "feedback is off: this router's user may not consume %r (%s); grant it "
                "(re-run `mesh access provision`) and restart the router",
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

    async def _on_feedback(self, message: AbstractIncomingMessage) -> None:
        try:
            await self.apply(message)
        except TRANSIENT_ERRORS:
            logger.warning("feedback not applied (outage); requeued", exc_info=True)
            await quietly(message.nack(requeue=True))
            return
        except Exception:
            # a bug must not hold the message (and a prefetch slot) forever
            logger.exception("feedback from user %r failed; dropped", message.user_id)
            await quietly(message.nack(requeue=False))
            return
        await quietly(message.ack())

    async def apply(self, message: AbstractIncomingMessage) -> None:
        """Apply one feedback message if its sender owns the task (else count and log)."""
        sender = message.user_id or ""
        try:
            feedback = decode(Feedback, message.body)
        except InvalidEnvelope:
            self.refused += 1
            logger.warning("unreadable feedback from user %r dropped", sender)
            return
        owner = (await self.store.state(feedback.task_id)).get("owner", "")
        if not owner or sender != owner:
            self.refused += 1
            logger.warning(
                "feedback on task_id=%s from user %r refused: the task is %s",
                feedback.task_id,
                sender,
                f"user {owner!r}'s" if owner else "unknown or has no owning client",
            )
            return
        try:
            agent_id, counted = await give_feedback(
                self.conn, self.publisher, feedback.task_id, feedback.good
            )
        except UnknownTask as exc:
            self.unknown += 1
            logger.info("feedback from user %r dropped: %s", sender, exc)
            return
        self.applied += 1
        logger.info(
            "feedback %s on task_id=%s for agent %s from %r%s",
            "good" if feedback.good else "bad",
            feedback.task_id,
            agent_id,
            sender,
            "" if counted else " (given before; not counted again)",
        )


__all__ = ["FeedbackConsumer"]
