"""`CompoundReplies`: the children's Results of compound requests, merged into one answer.

Every router consumes the one durable queue `Topology.compound_queue` (competing): a
child's Result is kept in its parent's hash (`Keys.compound`, field ``r<n>``) before the
delivery is acked, and the router that finds every part there merges them
(`mesh.router.merge`), finishes the parent's record with the merged Result (the first
finish wins: two routers completing at once answer once) and answers every waiter of
the parent. A router that dies mid-way leaves the Result in the queue (not acked) or in
Redis (kept): another router, or the next child's Result, completes the parent. A copy of
a Result (at-least-once delivery) overwrites its own field with the same Result.

Under access control only a router's user may answer here (the queue is one of its reply
queues, and the broker stamps the publisher's user): anything else is dropped and counted.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.access.roles import AccessScope, Role
from mesh.connection import MeshConnection
from mesh.dispatch.events import emit_states
from mesh.dispatch.store import TaskStore
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher, waiter_of
from mesh.retrying import with_retries
from mesh.router.compound import CORRELATION_SEP
from mesh.router.merge import merge_results
from mesh.schemas import InvalidEnvelope, Result, TaskEnvelope, decode
from mesh.wire import AckAfter, Subscriber

logger = logging.getLogger(__name__)

__all__ = ["CompoundReplies"]

#: the finish path of a parent from each state it may be in when its parts are all back
_PATHS: dict[str, tuple[str, ...]] = {
    "routing": ("dispatched", "accepted", "processing"),
    "dispatched": ("accepted", "processing"),
}


class CompoundReplies(Lifecycle):
    """Consumes the compound queue; answers each parent once all its parts are back."""

    def __init__(
        self, conn: MeshConnection, publisher: Publisher, store: TaskStore, by: str
    ) -> None:
        self.conn = conn
        self.topology = conn.topology
        self.publisher = publisher
        self.store = store
        self.by = by
        self.login = publisher.login
        self.queue_name = conn.topology.compound_queue(self.login)
        self.subscriber = Subscriber(
            conn, self._declare, self.take, AckAfter("child Results"), prefetch=64
        )
        self.trusted_sender = (
            AccessScope.from_settings(conn.settings).user(Role("router"))
            if conn.settings.access_control
            else None
        )
        #: parents answered with a merged Result; Results dropped (forged, unreadable)
        self.merged = 0
        self.dropped = 0

    async def start(self) -> None:
        await self.subscriber.start()

    async def close(self) -> None:
        await self.subscriber.close()

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        arguments: dict[str, Any] = {}
        if self.topology.queue_type == "quorum":
            arguments["x-queue-type"] = "quorum"
        # the compound queue is one of the router user's reply queues (`compound_queue`)
        queue = await channel.declare_queue(
            self.topology.reply_queue(f"{self.login}.compound"), durable=True, arguments=arguments
        )
        await queue.bind(self.topology.replies, routing_key=self.topology.reply_key(queue.name))
        return queue

    async def take(self, message: AbstractIncomingMessage) -> None:
        """One child's Result (acked once this returns)."""
        if self.trusted_sender is not None and message.user_id != self.trusted_sender:
            self.dropped += 1
            logger.warning("child Result from user %r dropped: not a router", message.user_id)
            return
        parent_id, _, number = (message.correlation_id or "").rpartition(CORRELATION_SEP)
        try:
            result = decode(Result, message.body)
        except InvalidEnvelope:
            self.dropped += 1
            logger.warning("unreadable child Result for %r dropped", parent_id)
            return
        if not parent_id or not number.isdigit():
            self.dropped += 1
            logger.warning("child Result task_id=%s names no parent; dropped", result.task_id)
            return
        await self.record(parent_id, int(number), result)

    async def record(self, parent_id: str, number: int, result: Result) -> None:
        """Keep part `number`'s Result; merge and answer when it was the last one."""
        key = self.store.keys.compound(parent_id)
        async with self.store.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, f"r{number}", result.model_dump_json())
            pipe.hgetall(key)
            reply = await pipe.execute()
        fields = {_s(k): v for k, v in reply[-1].items()}
        if "parts" not in fields or "envelope" not in fields:
            logger.warning("child Result of unknown compound task_id=%s dropped", parent_id)
            return
        parts: list[dict[str, Any]] = orjson.loads(fields["parts"])
        results = [fields.get(f"r{i}") for i in range(len(parts))]
        if any(r is None for r in results):
            return  # more parts to come
        parent = decode(TaskEnvelope, fields["envelope"])
        merged = merge_results(parent, parts, [decode(Result, r) for r in results if r])
        await self._answer(parent, merged)

    async def _answer(self, parent: TaskEnvelope, merged: Result) -> None:
        task_id = parent.task_id
        state = (await self.store.state(task_id)).get("state", "")
        path = (*_PATHS.get(state, ()), merged.status)
        commit = await self.store.finish(merged, *path, by=self.by, note="compound: merged")
        if commit.status == "ok":
            waiters = set(commit.waiters)
        elif commit.status == "done" and commit.result is not None:
            replied = (await self.store.holder_of(task_id)).get("replied") == "1"
            if replied:
                return  # answered before (another router, or this Result again)
            merged = commit.result
            waiters = set(await self.store.waiters(task_id))
        else:
            logger.warning(
                "compound task_id=%s not finished: its record is %s %s",
                task_id,
                commit.status,
                commit.detail,
            )
            return
        own = waiter_of(parent)
        if own:
            waiters.add(own)
        for waiter in sorted(waiters):
            await with_retries(lambda w=waiter: self.publisher.reply(w, merged))  # type: ignore[misc]
        await self.store.mark_replied(task_id)
        await emit_states(
            self.publisher,
            (merged.status,),
            task_id=task_id,
            trace_id=parent.trace_id,
            data={"compound": len(merged.output["parts"]) if merged.output else 0},
        )
        self.merged += 1
        logger.info("compound task_id=%s answered: %s", task_id, merged.status)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
