"""Call for bids: when no agent clears the threshold, ask the top candidates how sure they are.

The router publishes a `BidRequest` to every instance of each candidate agent on
`mesh.control` (routing key ``agent.<agent_id>``) and collects `Bid`s on its own exclusive
queue, bound to ``<ns>.bids`` with ``bid.<collector>`` (the request's ``reply_to``), until
the window closes or every candidate has answered. Under access control a bid counts
only from the worker user of the agent it names. The most confident bid
wins. The window is bounded by the task's deadline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.access.roles import AccessScope
from mesh.connection import MeshConnection, process_queue_id
from mesh.errors import NotStarted
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.schemas import Bid, BidRequest, InvalidEnvelope, TaskEnvelope, decode, encode, now_ms
from mesh.wire import NoAck, Subscriber

logger = logging.getLogger(__name__)


class BidCollector(Lifecycle):
    """Sends calls for bids and gathers the answers."""

    def __init__(self, conn: MeshConnection, publisher: Publisher) -> None:
        self.conn = conn
        self.publisher = publisher
        self.topology = conn.topology
        self.subscriber = Subscriber(conn, self._declare, self._on_bid, NoAck("bids"))
        self._queue: AbstractQueue | None = None
        self._pending: dict[str, tuple[set[str], list[Bid], asyncio.Event]] = {}
        self._key = ""
        #: under access control a bid counts only from the worker user of its agent
        self.scope = (
            AccessScope.from_settings(conn.settings) if conn.settings.access_control else None
        )
        self.refused = 0

    async def start(self) -> None:
        if self._queue is not None:
            return
        await self.subscriber.start()
        self._queue = self.subscriber.queue

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        collector_id = process_queue_id()
        queue = await channel.declare_queue(
            self.topology.bid_queue(collector_id), exclusive=True, auto_delete=True
        )
        # bids come through the bids exchange, keyed by this collector (no default exchange)
        self._key = self.topology.bid_key(collector_id)
        await queue.bind(self.topology.bids, routing_key=self._key)
        return queue

    async def _on_bid(self, message: AbstractIncomingMessage) -> None:
        try:
            bid = decode(Bid, message.body)
        except InvalidEnvelope as exc:
            logger.warning("unreadable bid dropped: %s", exc)
            return
        pending = self._pending.get(bid.task_id)
        if pending is None:
            return  # late: the window closed
        if self.scope is not None and not self.scope.is_worker_of(message.user_id, bid.agent_id):
            self.refused += 1
            logger.warning("bid for agent %r from user %r ignored", bid.agent_id, message.user_id)
            return
        waiting, bids, done = pending
        bids.append(bid)
        waiting.discard(bid.agent_id)
        if not waiting:
            done.set()

    async def call(
        self, envelope: TaskEnvelope, candidates: Sequence[str], window_ms: int
    ) -> tuple[Bid | None, list[Bid]]:
        """Ask `candidates`; returns the winning bid (None if nobody bid) and all bids."""
        if self._queue is None:
            raise NotStarted("BidCollector.start() was not awaited")
        if not candidates or window_ms <= 0:
            return None, []
        deadline = now_ms() + window_ms
        request = BidRequest(
            task_id=envelope.task_id,
            capability=envelope.capability,
            required_tags=envelope.required_tags,
            reply_to=self._key,
            deadline_ms=deadline,
        )
        body = encode(request)
        waiting = set(candidates)
        bids: list[Bid] = []
        done = asyncio.Event()
        self._pending[envelope.task_id] = (waiting, bids, done)
        try:
            for agent_id in candidates:
                await self.publisher.send_fast(
                    self.topology.control,
                    self.topology.control_agent_key(agent_id),
                    body,
                    type="bid_request",
                    expiration=window_ms / 1000.0,
                )
            try:
                async with asyncio.timeout(window_ms / 1000.0):
                    await done.wait()
            except TimeoutError:
                pass
        finally:
            self._pending.pop(envelope.task_id, None)
        eligible = [b for b in bids if b.agent_id in set(candidates) and b.confidence > 0]
        if not eligible:
            return None, bids
        best = max(eligible, key=lambda b: (b.confidence, -b.load))
        return best, bids

    async def close(self) -> None:
        self._queue = None
        await self.subscriber.close()
