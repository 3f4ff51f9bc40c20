"""`MeshClient`: publish task envelopes to `mesh.ingress` and await their Results.

Results come back on a reply queue owned by the client (named, exclusive, auto-delete),
so a robust reconnect restores it under the same name. Several requests can be in flight
at once; each waits on its own future, keyed by task_id.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.errors import NotStarted, RequestTimeout
from mesh.messaging import Publisher
from schemas import InvalidEnvelope, Result, TaskEnvelope, decode, new_id

logger = logging.getLogger(__name__)


class MeshClient:
    """Send tasks to the mesh: ``async with MeshClient(conn) as client: await client.request()``."""

    def __init__(self, conn: MeshConnection, *, client_id: str | None = None) -> None:
        self.conn = conn
        self.settings = conn.settings
        self.topology = conn.topology
        self.client_id = client_id or new_id()[:16]
        self.publisher = Publisher(conn)
        self._channel: AbstractChannel | None = None
        self._reply_queue: AbstractQueue | None = None
        self._waiters: dict[str, list[asyncio.Future[Result]]] = {}

    @property
    def reply_to(self) -> str:
        if self._reply_queue is None:
            raise NotStarted("MeshClient.start() was not awaited")
        return self._reply_queue.name

    async def start(self) -> MeshClient:
        if self._reply_queue is not None:
            return self
        await self.publisher.start()
        await self.topology.declare(self.publisher.channel)
        self._channel = await self.conn.channel(confirms=False, prefetch=256)
        self._reply_queue = await self._channel.declare_queue(
            f"{self.settings.namespace}.reply.{self.client_id}", exclusive=True, auto_delete=True
        )
        await self._reply_queue.consume(self._on_result, no_ack=True)
        return self

    async def _on_result(self, message: AbstractIncomingMessage) -> None:
        try:
            result = decode(Result, message.body)
        except InvalidEnvelope:
            logger.warning("unreadable result on %s dropped: %r", self.reply_to, message.body[:200])
            return
        for fut in self._waiters.pop(result.task_id, []):
            if not fut.done():
                fut.set_result(result)

    async def submit(self, envelope: TaskEnvelope) -> TaskEnvelope:
        """Publish `envelope` (with confirm) without waiting; returns what was sent."""
        if envelope.reply_to is None:
            envelope = envelope.model_copy(update={"reply_to": self.reply_to})
        await self.publisher.publish_envelope(
            self.topology.ingress, self.topology.ingress_key, envelope, mandatory=True
        )
        return envelope

    async def request(
        self,
        capability: str,
        payload: dict[str, Any] | None = None,
        *,
        wait_s: float | None = None,
        **fields: Any,
    ) -> Result:
        """Send a task and wait for its Result.

        `fields` are any other envelope fields (target, priority, timeout_ms, required_tags,
        task_id, trace_id...). The wait ends at the task's timeout plus a margin, or `wait_s`.

        Raises:
            pydantic.ValidationError: a field is out of bounds.
            RequestTimeout: no Result arrived in time.
        """
        envelope = TaskEnvelope(capability=capability, payload=payload or {}, **fields)
        return await self.send(envelope, wait_s=wait_s)

    async def send(self, envelope: TaskEnvelope, *, wait_s: float | None = None) -> Result:
        """Publish a ready envelope and wait for its Result."""
        if self._reply_queue is None:
            raise NotStarted("MeshClient.start() was not awaited")
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(envelope.task_id, []).append(fut)
        try:
            sent = await self.submit(envelope)
            limit = wait_s if wait_s is not None else sent.timeout_ms / 1000.0 + 5.0
            try:
                return await asyncio.wait_for(fut, timeout=limit)
            except TimeoutError:
                raise RequestTimeout(
                    f"no Result for task_id={sent.task_id} within {limit:.1f}s"
                ) from None
        finally:
            waiters = self._waiters.get(envelope.task_id)
            if waiters is not None and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self._waiters[envelope.task_id]

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        self._reply_queue = None
        for waiters in self._waiters.values():
            for fut in waiters:
                fut.cancel()
        self._waiters.clear()
        if channel is not None and not channel.is_closed:
            await channel.close()
        await self.publisher.close()

    async def __aenter__(self) -> MeshClient:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
