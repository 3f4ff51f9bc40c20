"""`BandGate`: an agent's concurrency shared by its priority bands, by weight when contended.

In quorum mode an agent has one queue per priority band (high, normal, low), each consumed
on its own channel. Each channel prefetches the agent's whole concurrency, so any one band
can keep every slot busy; the gate then lets at most ``slots`` tasks run at once and, while
tasks of several bands wait, hands freed slots out by weight (smooth weighted round robin:
5:3:1 gives ``h h n h n h l h n`` over nine slots). In classic mode there is one band and
the gate is a plain semaphore.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Sequence


class BandGate:
    """At most `slots` holders at once; waiting bands are served in proportion to weights."""

    def __init__(self, slots: int, weights: Sequence[int]) -> None:
        if slots < 1 or not weights or min(weights) < 1:
            raise ValueError(f"BandGate needs slots >= 1 and weights >= 1, got {slots} {weights}")
        self.slots = slots
        self.weights = tuple(weights)
        self._free = slots
        self._waiting: list[deque[asyncio.Future[None]]] = [deque() for _ in weights]
        self._current = [0] * len(weights)

    @property
    def running(self) -> int:
        return self.slots - self._free

    @property
    def waiting(self) -> int:
        return sum(1 for queue in self._waiting for fut in queue if not fut.done())

    async def acquire(self, band: int) -> None:
        """Wait for a slot for a task of `band` (an index into `weights`)."""
        if self._free > 0 and not self.waiting:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[band].append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed over as we were cancelled: pass it on
            raise

    def release(self) -> None:
        """Give a slot back: to the next waiting band by weight, or to the pool."""
        band = self._next_band()
        if band is None:
            self._free += 1
            return
        self._waiting[band].popleft().set_result(None)

    def _next_band(self) -> int | None:
        active = []
        for i, queue in enumerate(self._waiting):
            while queue and queue[0].done():  # cancelled waiters
                queue.popleft()
            if queue:
                active.append(i)
        if not active:
            return None
        total = 0
        for i in active:
            self._current[i] += self.weights[i]
            total += self.weights[i]
        best = max(active, key=lambda i: self._current[i])
        self._current[best] -= total
        return best


__all__ = ["BandGate"]
