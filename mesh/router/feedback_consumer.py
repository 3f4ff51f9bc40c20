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

from aio_pika.abc import AbstractIncomingMessage

from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.errors import UnknownTask
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.router.feedback import give_feedback
from mesh.schemas import Feedback, InvalidEnvelope, decode
from mesh.wire import AckAfter, Subscriber

logger = logging.getLogger(__name__)


class FeedbackConsumer(Lifecycle):
    """Consumes ``<ns>.feedback``; applies each task owner's feedback.

    Acked once handled; a router user that may not read the queue leaves it `disabled`.
    """

    def __init__(self, conn: MeshConnection, publisher: Publisher, store: TaskStore) -> None:
        self.conn = conn
        self.subscriber = Subscriber(
            conn,
            conn.topology.feedback,
            self.apply,
            AckAfter("feedback"),
            prefetch=conn.settings.prefetch,
            optional=True,
        )
        self.publisher = publisher
        self.store = store
        #: feedback applied (counted or not: a second verdict of the same kind counts once)
        self.applied = 0
        #: feedback not believed: unreadable, or not from the task's owner
        self.refused = 0
        #: feedback of the owner on a task that has no routing record
        self.unknown = 0

    @property
    def disabled(self) -> str | None:
        """Why feedback is off (this router's user may not read the queue), else None."""
        return self.subscriber.disabled

    async def start(self) -> None:
        await self.subscriber.start()

    async def close(self) -> None:
        await self.subscriber.close()

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
