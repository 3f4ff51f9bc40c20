"""Circuit breakers per agent: a sliding window of outcomes, open on too many failures.

Closed: calls flow and outcomes are counted over `window_s`. When at least `min_calls`
outcomes are in the window and the failure ratio exceeds `failure_ratio`, the breaker opens
for `open_s`: the router does not choose the agent. Then it is half-open: one probe task may
go; its success closes the breaker, its failure opens it again (seed 000 section 4.2).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from mesh.clock import Clock, SystemClock

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
    ) -> None:
        self.window_s = window_s
        self.failure_ratio = failure_ratio
        self.min_calls = min_calls
        self.open_s = open_s
        self.clock: Clock = clock or SystemClock()
        self._breakers: dict[str, _Breaker] = {}

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
        return self.state(agent_id)

    def states(self) -> dict[str, State]:
        """The state of every breaker that counted an outcome (for metrics: safe to call
        from another thread, it reads a copy)."""
        return {a: self.state(a) for a in list(self._breakers)}

    def blocked(self) -> set[str]:
        """Agents the router must not choose now (open, or half-open with a probe out)."""
        return {a for a in self._breakers if not self.allows(a)}

    def forget(self, agent_id: str) -> None:
        self._breakers.pop(agent_id, None)
