"""`RouterSettler`: the only router code that acks or nacks a delivery of its queue.

A delivery ends one of four ways: handled (acked in a batch, `mesh.acks.AckBatcher`); met a
broker or Redis outage (held a moment, longer while the outage lasts, then requeued: the
task records make the second pass safe); hit a bug (dead-lettered as ``unroutable`` with
"router internal error", then acked: a bug must neither stop the router nor lose the
task); or was cancelled by a shutdown (requeued).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from aio_pika.abc import AbstractIncomingMessage

from mesh.acks import AckBatcher
from mesh.retrying import TRANSIENT_ERRORS

if TYPE_CHECKING:
    from mesh.router.deps import RouterDeps

logger = logging.getLogger(__name__)

#: a message that met a broker or Redis outage is held this long before its requeue,
#: doubling with each outage in a row up to `OUTAGE_BACKOFF_MAX_S`
OUTAGE_BACKOFF_S = 0.05
OUTAGE_BACKOFF_MAX_S = 2.0
#: how long a nack on the way out may wait: on a channel that is gone (a robust one waits
#: for its reconnect) it must not hold a cancelled handler, and so a shutdown, forever
SETTLE_TIMEOUT_S = 5.0
_SETTLE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, TimeoutError)


class RouterSettler:
    def __init__(self, deps: RouterDeps) -> None:
        self.deps = deps
        self.acks = AckBatcher()
        #: deliveries handled to the end
        self.handled = 0
        #: transient failures in a row (the requeue backoff grows with them)
        self.outages = 0

    def received(self, message: AbstractIncomingMessage) -> None:
        self.acks.received(message)

    def done(self, message: AbstractIncomingMessage) -> None:
        self.handled += 1
        self.outages = 0
        self.acks.ack(message)

    async def outage(self, message: AbstractIncomingMessage) -> None:
        self.outages += 1
        delay = min(OUTAGE_BACKOFF_MAX_S, OUTAGE_BACKOFF_S * 2 ** min(self.outages, 8))
        logger.warning("transient failure; message requeued in %.2fs", delay, exc_info=True)
        await asyncio.sleep(delay * random.uniform(0.5, 1.0))
        await self.requeue(message)

    async def broken(self, message: AbstractIncomingMessage) -> None:
        logger.critical("router failed on a message; dead-lettering it", exc_info=True)
        await self.deps.dead_letter(
            "unroutable", message.body, details={"error": "router internal error"}
        )
        self.acks.ack(message)

    async def requeue(self, message: AbstractIncomingMessage) -> None:
        """Back into the router queue (an outage, a shutdown)."""
        self.acks.settled(message)
        await _settle_quietly(message.nack(requeue=True))

    async def drain(self) -> None:
        await self.acks.drain()


async def _settle_quietly(action: Awaitable[Any]) -> None:
    """Ack or nack; on a channel lost meanwhile the broker redelivers, which is what we want."""
    try:
        await asyncio.wait_for(action, SETTLE_TIMEOUT_S)
    except _SETTLE_ERRORS:
        logger.info("ack/nack on a lost channel skipped; the message will be redelivered")


__all__ = ["OUTAGE_BACKOFF_MAX_S", "OUTAGE_BACKOFF_S", "RouterSettler"]
