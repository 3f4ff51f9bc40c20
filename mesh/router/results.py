"""`ResultForwarder`: under access control a router, not the worker, answers the callers.

A worker commits its Result under the fencing check (as always) in its agent's view of the
task records (`Keys.for_agent`: the mesh's own records are no worker's to touch), keeps a
copy under its own agent's key (`Keys.sealed`, which no other agent's Redis user may write),
and then publishes a notice to ``<ns>.results`` instead of writing into its callers' reply
queues. The router that takes the notice believes nothing in it but the task_id, and
takes it in one Redis step (`TaskStore.relay`): the broker-validated sender must be the
worker user of an agent a router dispatched the task to (`Keys.dispatched_to`, which only
routers write), and what it forwards to every waiter is that agent's sealed copy, which
must be a terminal Result of this very task, once the mesh's record is finished from it
(the first end wins: a task the reaper or a deadline ended keeps that answer). Neither
check reads a key a worker may write but the sealed copy of its own agent, so another
agent's worker cannot have a Result forwarded, or a record finished, for a task that is
not its own, through the broker or through Redis. A forged notice (another user, a task
that is not finished, a copy of another task) is dropped and counted; callers accept
Results only from a router's user (`MeshClient.forged_results`).

The copy is forwarded as stored, not decoded and encoded again (callers decode it). The
notices taken while a relay is out go together in the next one (`mesh.functions.CallBatch`:
one pipelined round trip; an idle router sends each at once), their acks go in batches
(`AckBatched`) and the ``replied`` marks in pipelined batches (`ReplyMarks`): a Result
costs the router at most one Redis round trip.
"""

from __future__ import annotations

import logging

from aio_pika.abc import AbstractIncomingMessage

from mesh.access.roles import AccessScope
from mesh.connection import MeshConnection
from mesh.dispatch.store import ReplyMarks, TaskStore
from mesh.hooks import NO_HOOKS, Hooks
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.retrying import with_retries
from mesh.schemas import InvalidEnvelope, Result, decode
from mesh.wire import AckBatched, Subscriber

logger = logging.getLogger(__name__)


class ResultForwarder(Lifecycle):
    """Consumes ``<ns>.results``; forwards each finished task's stored Result.

    Acked once handled; a router user that may not read the queue leaves it `disabled`.
    """

    def __init__(
        self, conn: MeshConnection, publisher: Publisher, store: TaskStore, by: str = "router"
    ) -> None:
        self.conn = conn
        self.subscriber = Subscriber(
            conn,
            conn.topology.results,
            self.forward,
            AckBatched("result notices"),
            prefetch=conn.settings.prefetch,
            optional=True,
        )
        self.publisher = publisher
        self.store = store
        #: the ``replied`` marks of the tasks answered, written in batches
        self.replied = ReplyMarks(store)
        self.scope = AccessScope.from_settings(conn.settings)
        self.forwarded = 0
        #: who finishes the mesh's records (the router's id, in their history)
        self.by = by
        #: the router's hooks (spans: a forwarded Result continues the worker's hop)
        self.hooks: Hooks = NO_HOOKS
        #: notices not believed: another user's, or of a task with no stored Result
        self.refused = 0

    @property
    def disabled(self) -> str | None:
        """Why notices are off (this router's user may not read the queue), else None."""
        return self.subscriber.disabled

    async def start(self) -> None:
        await self.subscriber.start()

    async def close(self) -> None:
        await self.subscriber.close()
        await self.replied.close()

    async def forward(self, message: AbstractIncomingMessage) -> None:
        task_id = _task_id_of(message)
        if task_id is None:
            self._refuse("unreadable result notice from %r dropped", message.user_id)
            return
        role = self.scope.role_of(message.user_id or "")
        if role is None or role.kind != "worker":
            self._refuse(
                "result notice for task_id=%s from user %r refused: not a worker's",
                task_id,
                message.user_id,
            )
            return
        relay = await self.store.relay(task_id, role.name, by=self.by)
        if relay.status in ("ok", "again"):
            with self.hooks.relay(message.headers or {}):
                for waiter in relay.waiters:
                    await self._reply(waiter, relay.body, task_id)
            self.replied.mark(task_id)
            self.forwarded += 1
        elif relay.status == "foreign":
            self._refuse(
                "result notice for task_id=%s from user %r refused: the task went to %s",
                task_id,
                message.user_id,
                relay.detail or "no agent",
            )
        elif relay.status in ("unsealed", "invalid"):
            self._refuse(
                "result notice for task_id=%s refused: agent %r sealed %s",
                task_id,
                role.name,
                "no Result" if relay.status == "unsealed" else "no terminal Result of the task",
            )
        elif relay.status == "done":
            logger.info("task_id=%s finished before (%s); notice dropped", task_id, relay.detail)
        else:
            logger.warning(
                "result notice for task_id=%s not applied: the mesh's record is refused %s",
                task_id,
                relay.detail,
            )

    def _refuse(self, text: str, *args: object) -> None:
        self.refused += 1
        logger.warning(text, *args)

    async def _reply(self, waiter: str, body: bytes, task_id: str) -> None:
        await with_retries(lambda: self.publisher.reply_encoded(waiter, body, task_id))


#: what the message_id of a Result message starts with (`mesh.messaging.result_message`)
_RESULT_ID = "result:"


def _task_id_of(message: AbstractIncomingMessage) -> str | None:
    """The task_id a notice names: its message_id's (``result:<task_id>``), else its body's
    (a Result); None when neither reads. Nothing else of a notice is believed."""
    message_id = message.message_id or ""
    if message_id.startswith(_RESULT_ID) and 0 < len(message_id) - len(_RESULT_ID) <= 128:
        return message_id[len(_RESULT_ID) :]
    try:
        return decode(Result, message.body).task_id
    except InvalidEnvelope:
        return None


__all__ = ["ResultForwarder"]
