"""Whether a router consumes the router queue, as a client sees it.

The broker counts a queue's consumers; a passive declare reads the count and needs no
permission (it works under access control too). `MeshClient` asks before each request,
trusting a count above zero for `ROUTER_CHECK_TTL_S`, and asks again while requests wait
(one question for all of them). A zero is believed once it held for `ROUTERLESS_CONFIRM_S`
(`absent`): a router failing over to another cluster node is uncounted for a moment.
A count the broker did not give (the connection is away, the answer is late) is unknown,
never zero: a broker restart must not be mistaken for routers gone.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractQueue, AbstractRobustChannel

from mesh.connection import MeshConnection
from mesh.retrying import TRANSIENT_ERRORS

logger = logging.getLogger(__name__)

#: how long a consumer count is believed before the broker is asked again
ROUTER_CHECK_TTL_S = 3.0
#: a broker slower than this to answer a passive declare leaves the count unknown
ROUTER_CHECK_TIMEOUT_S = 1.0
#: "no router" is believed once the broker said zero for this long in a row (`absent`): a
#: router failing over to another cluster node, or its quorum queue's leader moving, is
#: uncounted for a moment, and a request sent then must not fail
ROUTERLESS_CONFIRM_S = 1.0
#: how often a zero is asked again while it is being confirmed
ROUTERLESS_RECHECK_S = 0.2


@dataclass(frozen=True, slots=True)
class RouterQueue:
    """What the broker said of the router queue."""

    #: routers consuming it (0: none, or the queue is gone)
    routers: int
    #: ingress messages waiting in it (none are routed while `routers` is 0)
    waiting: int


#: the broker did not answer: it is away (aio-pika raises a bare RuntimeError for a channel
#: asked of a robust connection while it reconnects)
_NO_ANSWER: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, RuntimeError)


class RouterWatch:
    """The consumer count of the router queue, read on a channel of its own."""

    def __init__(
        self,
        conn: MeshConnection,
        *,
        ttl_s: float = ROUTER_CHECK_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        confirm_s: float = ROUTERLESS_CONFIRM_S,
        recheck_s: float = ROUTERLESS_RECHECK_S,
    ) -> None:
        self.conn = conn
        self.queue = conn.topology.router_queue
        self.ttl_s = ttl_s
        self.clock = clock
        self.confirm_s = confirm_s
        self.recheck_s = recheck_s
        self._channel: AbstractChannel | None = None
        #: the broker's last answer and when it came
        self._seen: RouterQueue | None = None
        self._seen_at = 0.0
        #: since when every answer said zero routers (None: the last one did not)
        self._zero_since: float | None = None
        #: one question at a time: the requests waiting together share its answer
        self._asking = asyncio.Lock()

    async def routers(self, *, fresh: bool = False) -> int | None:
        """Routers consuming the router queue (0: none), None when the broker did not say.

        A count above zero is reused for `ttl_s` unless `fresh`; zero is always asked
        again (a router that just started is seen at once).
        """
        seen = self._seen
        if not fresh and seen is not None and seen.routers and self._age() < self.ttl_s:
            return seen.routers
        answer = await self.read()
        return None if answer is None else answer.routers

    async def absent(self) -> bool:
        """Does no router consume the router queue, as the broker said for `confirm_s` in a
        row? A zero is asked again every `recheck_s` meanwhile (requests asking together
        share each answer); False at once when a router is counted or the broker does not
        say. Once confirmed, later asks answer at once while the count stays zero."""
        while True:
            seen = await self.read(max_age_s=self.recheck_s / 2)
            if seen is None or seen.routers or self._zero_since is None:
                return False
            if self.clock() - self._zero_since >= self.confirm_s:
                return True
            await asyncio.sleep(self.recheck_s)

    async def read(self, *, max_age_s: float = 0.0) -> RouterQueue | None:
        """The broker's answer, reused when younger than `max_age_s` (whatever it said);
        None when the broker did not answer (in time)."""
        async with self._asking:
            if self._seen is not None and self._age() < max_age_s:
                return self._seen
            try:
                seen = await asyncio.wait_for(self._read(), ROUTER_CHECK_TIMEOUT_S)
            except _NO_ANSWER as exc:
                logger.info("consumers of %s unknown: %r", self.queue, exc)
                self._seen = self._zero_since = None
                return None
            self._seen, self._seen_at = seen, self.clock()
            if seen.routers:
                self._zero_since = None
            elif self._zero_since is None:
                self._zero_since = self._seen_at
            return seen

    def _age(self) -> float:
        return self.clock() - self._seen_at

    async def _read(self) -> RouterQueue:
        channel = self._channel
        if channel is None or channel.is_closed:
            channel = self._channel = await self.conn.channel(confirms=False)
        try:
            queue = await passive_queue(channel, self.queue)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            # the 404 closed the channel; the next read opens another
            return RouterQueue(0, 0)
        declared = queue.declaration_result
        return RouterQueue(declared.consumer_count or 0, declared.message_count or 0)

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            try:
                await channel.close()
            except TRANSIENT_ERRORS:
                logger.debug("router watch channel already gone")


async def passive_queue(channel: AbstractChannel, name: str) -> AbstractQueue:
    """A passive declare of queue `name`, asked of the broker (its counts are of now);
    raises `aio_pika.exceptions.ChannelNotFoundEntity` (closing `channel`) when missing."""
    # a robust channel answers a passive declare of a name it restores from memory, with
    # the count of then: robust=False makes every declare a question to the broker
    if isinstance(channel, AbstractRobustChannel):
        return await channel.declare_queue(name, passive=True, robust=False)
    return await channel.declare_queue(name, passive=True)


__all__ = [
    "ROUTERLESS_CONFIRM_S",
    "ROUTER_CHECK_TTL_S",
    "RouterQueue",
    "RouterWatch",
    "passive_queue",
]
