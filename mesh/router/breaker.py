"""Circuit breakers per agent: a sliding window of outcomes, open on too many failures.

Closed: calls flow and outcomes are counted over `window_s`. When at least `min_calls`
outcomes are in the window and the failure ratio exceeds `failure_ratio`, the breaker opens
for `open_s`: the router does not choose the agent. Then it is half-open: one probe task may
go; its success closes the breaker, its failure opens it again.

Every router keeps its own window; an opening is shared through Redis (`SharedBreakers`:
``<prefix>:breaker:<agent_id>`` holds the time it stays open until), so a router that did
not see the failures refuses the agent too. Each opening also raises
``<prefix>:breakers-version``: a router reads that one counter at most every `SHARED_TTL_S`
and an agent's key only when the counter moved since it last read that key (no Redis round
trip on most decisions, one a while whatever the number of agents targeted); when Redis is
away it decides with its own view.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mesh.clock import Clock, SystemClock
from mesh.keys import Keys
from mesh.outage import report as report_outage
from mesh.retrying import TRANSIENT_ERRORS
from mesh.schemas import now_ms

logger = logging.getLogger(__name__)

#: how long a router believes what it read of another router's opening
SHARED_TTL_S = 0.5

State = Literal["closed", "open", "half_open"]


@dataclass(slots=True)
class _Breaker:
    outcomes: deque[tuple[float, bool]] = field(default_factory=deque)
    #: failures among `outcomes`, kept as they enter and leave the window (O(1) per record)
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False


class BreakerBoard:
    """The breakers of every agent a router knows."""

    def __init__(
        self,
        *,
        window_s: float = 10.0,
        failure_ratio: float = 0.5,
        min_calls: int = 4,
        open_s: float = 30.0,
        clock: Clock | None = None,
        on_open: Callable[[str, float], None] | None = None,
    ) -> None:
        self.window_s = window_s
        self.failure_ratio = failure_ratio
        self.min_calls = min_calls
        self.open_s = open_s
        self.clock: Clock = clock or SystemClock()
        self._breakers: dict[str, _Breaker] = {}
        #: the agents whose breaker is open or half-open (the only ones `blocked` can name)
        self._opened: set[str] = set()
        #: told (agent_id, seconds it stays open) each time a breaker opens
        self.on_open = on_open

    def state(self, agent_id: str) -> State:
        b = self._breakers.get(agent_id)
        if b is None or b.opened_at is None:
            return "closed"
        if self.clock.monotonic() - b.opened_at < self.open_s:
            return "open"
        return "half_open"

    def allows(self, agent_id: str) -> bool:
        """May the router choose `agent_id` now? (half-open: only while no probe is out)"""
        state = self.state(agent_id)
        if state == "closed":
            return True
        if state == "open":
            return False
        return not self._breakers[agent_id].probing

    def on_dispatch(self, agent_id: str) -> None:
        """Record that a task went to `agent_id` (a half-open breaker now has its probe)."""
        if self.state(agent_id) == "half_open":
            self._breakers[agent_id].probing = True

    def record(self, agent_id: str, ok: bool) -> State:
        """Count an outcome; returns the breaker's state after it."""
        now = self.clock.monotonic()
        b = self._breakers.setdefault(agent_id, _Breaker())
        state = self.state(agent_id)
        if state == "half_open":
            b.probing = False
            b.outcomes.clear()
            b.failures = 0
            b.opened_at = None if ok else now
            if ok:
                self._opened.discard(agent_id)
            else:
                self._on_opened(agent_id)
            return self.state(agent_id)
        if state == "open":
            return state
        b.outcomes.append((now, ok))
        b.failures += not ok
        while b.outcomes and now - b.outcomes[0][0] > self.window_s:
            b.failures -= not b.outcomes.popleft()[1]
        calls = len(b.outcomes)
        if calls >= self.min_calls and b.failures / calls > self.failure_ratio:
            b.opened_at = now
            b.outcomes.clear()
            b.failures = 0
            self._on_opened(agent_id)
        return self.state(agent_id)

    def _on_opened(self, agent_id: str) -> None:
        self._opened.add(agent_id)
        logger.warning("breaker of agent=%s open for %gs", agent_id, self.open_s)
        if self.on_open is not None:
            self.on_open(agent_id, self.open_s)

    def states(self) -> dict[str, State]:
        """The state of every breaker that counted an outcome (for metrics: safe to call
        from another thread, it reads a copy)."""
        return {a: self.state(a) for a in list(self._breakers)}

    def blocked(self) -> set[str]:
        """Agents the router must not choose now (open, or half-open with a probe out)."""
        return {a for a in self._opened if not self.allows(a)}

    def forget(self, agent_id: str) -> None:
        self._breakers.pop(agent_id, None)
        self._opened.discard(agent_id)


class SharedBreakers:
    """The openings of every router's breakers, in Redis (one key per agent, expiring)."""

    def __init__(self, redis: Any, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        #: agent_id -> (the openings counter when read, epoch ms it is open until; 0: not)
        self._seen: dict[str, tuple[int, int]] = {}
        #: the openings counter (`Keys.breakers_version`) as last read, and when (monotonic)
        self._version = -1
        self._version_read = float("-inf")
        self._writes: set[asyncio.Task[None]] = set()

    def publish(self, agent_id: str, open_s: float) -> None:
        """A breaker of this router opened: tell the others (written in the background)."""
        until = now_ms() + int(open_s * 1000)
        self._seen[agent_id] = (self._version, until)
        task = asyncio.get_running_loop().create_task(self._write(agent_id, until, open_s))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _write(self, agent_id: str, until: int, open_s: float) -> None:
        try:
            pipe = self.redis.pipeline(transaction=False)
            pipe.set(self.keys.breaker(agent_id), until, px=int(open_s * 1000))
            pipe.incr(self.keys.breakers_version())
            await pipe.execute()
        except TRANSIENT_ERRORS as exc:
            if not report_outage(exc, what="sharing breakers"):
                logger.warning("breaker of agent=%s not shared (Redis away)", agent_id)

    async def open_until_ms(self, agent_id: str) -> int:
        """Until when (epoch ms) some router holds `agent_id`'s breaker open (0: none)."""
        seen = self._seen.get(agent_id)
        try:
            version = await self._current_version()
            if seen is not None and seen[0] == version:
                return seen[1]  # no breaker opened anywhere since it was read
            raw = await self.redis.get(self.keys.breaker(agent_id))
        except TRANSIENT_ERRORS:
            return seen[1] if seen is not None else 0  # Redis away: our own view
        until = int(raw) if raw is not None else 0
        self._seen[agent_id] = (version, until)
        return until

    async def _current_version(self) -> int:
        """The openings counter, read from Redis at most every `SHARED_TTL_S`."""
        now = time.monotonic()
        if now - self._version_read >= SHARED_TTL_S:
            raw = await self.redis.get(self.keys.breakers_version())
            self._version = int(raw) if raw is not None else 0
            self._version_read = now
        return self._version
