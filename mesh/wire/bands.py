"""Priority bands drained by weight: `BandGate` and `BandedSubscriber`.

A router's intake and an agent's tasks are one queue per priority band (high, normal, low;
`mesh.topology.PRIORITY_BANDS`), in both queue modes. `BandedSubscriber` consumes each on a
channel of its own; its `BandGate` lets at most ``slots`` deliveries be handled at once and,
while deliveries of several bands wait, hands freed slots out by weight (smooth weighted
round robin: 5:3:1 gives ``h n h l h n h n h``, again and again: 5 high, 3 normal and 1 low
in every nine slots). So a backlog of low-priority tasks holds a high one up by at most the
slots already running, and a flood of high-priority tasks leaves the low band its weight's
share (seed 002 section 7.3: strict priority starves it).

Each channel prefetches one more than ``slots``: any one band alone can keep every slot busy
and still have a delivery waiting, so a freed slot finds every band with a backlog waiting
for it (prefetching only ``slots``, a band whose deliveries hold every slot would have none
waiting, and lose each freed slot to the others).

The holder of a slot is whoever the handler says: the router handles a delivery inside
``async with bands.slot(band)``; a worker, whose run outlives the delivery callback, takes
the slot in the task it spawns for the run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from aio_pika.abc import AbstractIncomingMessage

from mesh.connection import MeshConnection
from mesh.lifecycle import Lifecycle
from mesh.wire.consume import SettlePolicy, Subscriber

#: handles one delivery of the band at that index of the queues
BandHandler = Callable[[AbstractIncomingMessage, int], Awaitable[None]]


class BandGate:
    """At most `slots` holders at once; waiting bands are served in proportion to weights."""

    def __init__(self, slots: int, weights: Sequence[int]) -> None:
        if slots < 1 or not weights or min(weights) < 1:
            raise ValueError(f"BandGate needs slots >= 1 and weights >= 1, got {slots} {weights}")
        self.slots = slots
        self.weights = tuple(weights)
        self._free = slots
        self._waiting: list[deque[asyncio.Future[None]]] = [deque() for _ in weights]
        #: waiters not yet served nor cancelled (the fast path reads it, never a scan)
        self._count = 0
        self._current = [0] * len(weights)
        #: slots handed out per band (what a benchmark or a test reads as shares)
        self.granted = [0] * len(weights)

    @property
    def running(self) -> int:
        return self.slots - self._free

    @property
    def waiting(self) -> int:
        return self._count

    def waiting_in(self, band: int) -> int:
        return sum(1 for fut in self._waiting[band] if not fut.done())

    async def acquire(self, band: int) -> None:
        """Wait for a slot for a delivery of `band` (an index into `weights`)."""
        if self._free > 0 and not self._count:
            self._free -= 1
            self.granted[band] += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[band].append(fut)
        self._count += 1
        try:
            await fut
        except asyncio.CancelledError:
            if fut.cancelled():
                self._count -= 1  # left in its deque, skipped when reached
            else:
                self.release()  # the slot was handed over as we were cancelled: pass it on
            raise

    def release(self) -> None:
        """Give a slot back: to the next waiting band by weight, or to the pool."""
        band = self._next_band()
        if band is None:
            self._free += 1
            return
        self._count -= 1
        self.granted[band] += 1
        self._waiting[band].popleft().set_result(None)

    @contextlib.asynccontextmanager
    async def slot(self, band: int) -> AsyncIterator[None]:
        """Hold a slot of `band` for the block."""
        await self.acquire(band)
        try:
            yield
        finally:
            self.release()

    def _next_band(self) -> int | None:
        active = []
        for i, queue in enumerate(self._waiting):
            while queue and queue[0].done():  # cancelled waiters
                queue.popleft()
            if queue:
                active.append(i)
        if not active:
            return None
        if len(active) == 1:
            return active[0]
        total = 0
        for i in active:
            self._current[i] += self.weights[i]
            total += self.weights[i]
        best = max(active, key=lambda i: self._current[i])
        self._current[best] -= total
        return best


def _of_band(
    handle: BandHandler, band: int
) -> Callable[[AbstractIncomingMessage], Awaitable[None]]:
    async def handle_band(message: AbstractIncomingMessage) -> None:
        await handle(message, band)

    return handle_band


class BandedSubscriber(Lifecycle):
    """Consumes one queue per band, ``slots`` deliveries handled at once, shared by weight.

    `queues` are (queue name, weight) pairs, highest priority first (`Topology.router_queues`,
    `Topology.agent_queues`); `handle` gets each delivery with its band's index and takes
    its slot with `slot` (or `gate`); `policy` builds each band's settle policy (one per
    channel: an `AckBatched` policy batches one channel's acks).
    """

    def __init__(
        self,
        conn: MeshConnection,
        queues: Sequence[tuple[str, int]],
        handle: BandHandler,
        policy: Callable[[], SettlePolicy],
        *,
        slots: int,
    ) -> None:
        self.gate = BandGate(slots, [weight for _, weight in queues])
        self.subscribers = [
            Subscriber(conn, name, _of_band(handle, band), policy(), prefetch=slots + 1)
            for band, (name, _weight) in enumerate(queues)
        ]

    @property
    def policies(self) -> list[SettlePolicy]:
        return [sub.policy for sub in self.subscribers]

    @property
    def delivered(self) -> int:
        return sum(sub.delivered for sub in self.subscribers)

    def slot(self, band: int) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold a slot of `band` for the block (`BandGate.slot`)."""
        return self.gate.slot(band)

    async def start(self) -> BandedSubscriber:
        """Consume every band (highest first); a second call does nothing."""
        started: list[Subscriber] = []
        try:
            for sub in self.subscribers:
                await sub.start()
                started.append(sub)
        except BaseException:
            for sub in started:
                await sub.close()
            raise
        return self

    async def stop(self) -> None:
        """Stop taking deliveries on every band; those in hand go on."""
        for sub in self.subscribers:
            await sub.stop()

    async def close(self) -> None:
        for sub in self.subscribers:
            await sub.close()


__all__ = ["BandGate", "BandHandler", "BandedSubscriber"]
