"""The worker's control queue: answers calls for bids with the agent's `bidder`.

Each instance owns an exclusive, auto-delete queue on `mesh.control`, bound to
``instance.<instance_id>`` and ``agent.<agent_id>``; a call for bids to an agent reaches
every instance, and each answers with its own confidence and current load. Bids are
transient and sent without confirms: a lost bid just does not count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.schemas import Bid, BidRequest, InvalidEnvelope, decode, encode, now_ms
from mesh.topology import declare_spec
from mesh.wire import NoAck, Subscriber
from mesh.worker.agent import Agent

logger = logging.getLogger(__name__)


class ControlConsumer(Lifecycle):
    """Consumes one instance's control queue (started only for agents with a bidder)."""

    def __init__(
        self,
        conn: MeshConnection,
        agent: Agent,
        instance_id: str,
        publisher: Publisher,
        load: Callable[[], int],
    ) -> None:
        self.conn = conn
        self.agent = agent
        self.instance_id = instance_id
        self.publisher = publisher
        self.load = load
        self.subscriber = Subscriber(
            conn, self._declare, self._on_message, NoAck("calls for bids"), prefetch=16
        )
        self.bids = 0

    async def start(self) -> None:
        if self.agent.bidder_fn is None:
            return
        await self.subscriber.start()

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        topology = self.conn.topology
        await declare_spec(channel, topology.instance_spec(self.agent.agent_id, self.instance_id))
        return await channel.get_queue(topology.instance_queue(self.instance_id))

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        if message.type != "bid_request" or self.agent.bidder_fn is None:
            return
        try:
            request = decode(BidRequest, message.body)
        except InvalidEnvelope as exc:
            logger.warning("unreadable call for bids dropped: %s", exc)
            return
        try:
            confidence = await self.agent.bidder_fn(request)
        except Exception:
            logger.warning("bidder of %s failed; no bid", self.agent.agent_id, exc_info=True)
            return
        if confidence is None or now_ms() >= request.deadline_ms:
            return
        bid = Bid(
            task_id=request.task_id,
            agent_id=self.agent.agent_id,
            instance_id=self.instance_id,
            confidence=min(max(float(confidence), 0.0), 1.0),
            load=float(self.load()) / max(self.agent.max_concurrency, 1),
        )
        answer = aio_pika.Message(encode(bid), content_type="application/json")
        topology = self.conn.topology
        if request.reply_to.startswith(topology.bid_key("")):
            exchange = await self.publisher.exchange(topology.bids)
        else:  # an older router's queue name
            exchange = self.publisher.channel.default_exchange
        await self.publisher.send(exchange, answer, request.reply_to, mandatory=False)
        self.bids += 1

    async def close(self) -> None:
        await self.subscriber.close()
