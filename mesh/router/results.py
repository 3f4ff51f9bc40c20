"""`ResultForwarder`: under access control a router, not the worker, answers the callers.

A worker commits its Result under the fencing check (as always) in its agent's view of the
task records (`Keys.for_agent`: the mesh's own records are no worker's to touch), keeps a
copy under its own agent's key (`Keys.sealed`, which no other agent's Redis user may write),
and then publishes a notice to ``<ns>.results`` instead of writing into its callers' reply
queues. The router that takes the notice believes nothing in it but the task_id: the
broker-validated sender must be the worker user of an agent a router dispatched the task to
(`Keys.dispatched_to`, which only routers write), and what it forwards to every waiter is
that agent's sealed copy, once the router has finished the mesh's record from it (the first
end wins: a task the reaper or a deadline ended keeps that answer). Neither check reads a
key a worker may write, so another agent's worker cannot have a Result forwarded for a task
that is not its own, through the broker or through Redis. A forged notice (another user, a
task that is not finished) is dropped and counted; callers accept Results only from a
router's user (`MeshClient.forged_results`).
"""

from __future__ import annotations

import logging

from aio_pika.abc import AbstractIncomingMessage

from mesh.access.roles import AccessScope
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.hooks import NO_HOOKS, Hooks
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.retrying import with_retries
from mesh.schemas import InvalidEnvelope, Result, decode
from mesh.wire import AckAfter, Subscriber

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
            AckAfter("result notices"),
            prefetch=conn.settings.prefetch,
            optional=True,
        )
        self.publisher = publisher
        self.store = store
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

    async def forward(self, message: AbstractIncomingMessage) -> None:
        try:
            task_id = decode(Result, message.body).task_id
        except InvalidEnvelope:
            self.refused += 1
            logger.warning("unreadable result notice from %r dropped", message.user_id)
            return
        agents = await self.store.dispatched_agents(task_id)
        agent_id = next((a for a in agents if self.scope.is_worker_of(message.user_id, a)), None)
        if agent_id is None:
            self.refused += 1
            logger.warning(
                "result notice for task_id=%s from user %r refused: the task went to %s",
                task_id,
                message.user_id,
                ", ".join(sorted(agents)) or "no agent",
            )
            return
        stored = await self.store.sealed_result(agent_id, task_id)
        if stored is None:
            self.refused += 1
            logger.warning(
                "result notice for task_id=%s refused: agent %r sealed no Result", task_id, agent_id
            )
            return
        waiters = await self._finish(stored, agent_id)
        if waiters is None:
            return
        with self.hooks.relay(message.headers or {}):
            for waiter in waiters:
                await self._reply(waiter, stored)
        await self.store.mark_replied(task_id)
        self.forwarded += 1

    async def _finish(self, sealed: Result, agent_id: str) -> tuple[str, ...] | None:
        """Finish the mesh's record of the task from the agent's sealed Result (the worker
        moved only its view); the waiters to answer, or None when there is nothing to send.

        A record finished before is answered again only when it holds this very Result and
        its callers were not told yet (a notice redelivered after a crash); one the mesh
        ended itself first (the reaper, a deadline) keeps its answer."""
        task_id = sealed.task_id
        commit = await self.store.finish(
            sealed,
            "accepted",
            "processing",
            sealed.status,
            by=self.by,
            note=f"from agent {agent_id}",
            agent_id=agent_id,
            quiet=True,
        )
        if commit.status == "ok":
            return commit.waiters
        if commit.status == "done" and commit.result is not None:
            same = commit.result.instance_id == sealed.instance_id
            replied = (await self.store.holder_of(task_id)).get("replied") == "1"
            if same and not replied:
                return tuple(await self.store.waiters(task_id))
            logger.info(
                "task_id=%s finished before (%s); notice dropped", task_id, commit.result.status
            )
            return None
        logger.warning(
            "result notice for task_id=%s not applied: the mesh's record is %s %s",
            task_id,
            commit.status,
            commit.detail,
        )
        return None

    async def _reply(self, waiter: str, result: Result) -> None:
        await with_retries(lambda: self.publisher.reply(waiter, result))


__all__ = ["ResultForwarder"]
