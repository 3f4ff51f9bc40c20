"""Runtime facts about each agent that scoring weighs besides similarity, kept as arrays
aligned with the capability index's rows so a decision over 10,000 agents never walks
Python objects."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from mesh.router.rows import grow_rows, move_row

F32 = NDArray[np.float32]

#: statuses an agent can be routed to
ROUTABLE = "up"


@dataclass(frozen=True)
class AgentStats:
    """Runtime facts about one agent that scoring weighs besides similarity."""

    load: int = 0
    max_concurrency: int = 1
    #: share of recent tasks that succeeded, in [0, 1]
    success_rate: float = 1.0
    #: seconds since the agent last got a task (large when it never did)
    idle_s: float = 1e9
    status: str = ROUTABLE
    #: priority levels (each worth `ScoreWeights.priority_bonus`)
    priority: int = 0
    #: tasks completed so far; below `cold_start_completions` the agent is "cold" (its quota)
    completed: int = 0


class StatsTable:
    """One array per fact, one row per agent; rows are managed by the owning index."""

    #: the arrays, grown and moved together
    ARRAYS = ("load", "max_conc", "success", "idle", "routable", "priority", "completed")

    def __init__(self, capacity: int) -> None:
        self.load = np.zeros(capacity, np.float32)
        self.max_conc = np.ones(capacity, np.float32)
        self.success = np.ones(capacity, np.float32)
        self.idle = np.full(capacity, 1e9, np.float32)
        self.routable = np.zeros(capacity, np.bool_)
        self.priority = np.zeros(capacity, np.float32)
        self.completed = np.zeros(capacity, np.int64)
        #: raised by every change of a row: what is derived from the arrays alone (the
        #: weighted stats parts of `mesh.router.scoring`) holds while it stays the same
        self.version = 0

    def grow(self, capacity: int) -> None:
        grow_rows(self, self.ARRAYS, capacity)
        self.version += 1

    def move(self, source: int, target: int) -> None:
        """Copy row `source` onto row `target` (the index fills a removed row)."""
        move_row(self, self.ARRAYS, source, target)
        self.version += 1

    def set(self, row: int, stats: AgentStats) -> None:
        self.version += 1
        self.load[row] = stats.load
        self.max_conc[row] = max(stats.max_concurrency, 1)
        self.success[row] = stats.success_rate
        self.idle[row] = stats.idle_s
        self.routable[row] = stats.status == ROUTABLE
        self.priority[row] = stats.priority
        self.completed[row] = stats.completed

    def dispatched(self, row: int) -> None:
        """One more task in flight at `row`, and not idle (what `set` would write with the
        row's own stats, load + 1 and idle 0)."""
        self.load[row] += 1
        self.idle[row] = 0.0
        self.version += 1

    def get(self, row: int) -> AgentStats:
        return AgentStats(
            load=int(self.load[row]),
            max_concurrency=int(self.max_conc[row]),
            success_rate=float(self.success[row]),
            idle_s=float(self.idle[row]),
            status=ROUTABLE if self.routable[row] else "unavailable",
            priority=int(self.priority[row]),
            completed=int(self.completed[row]),
        )


@dataclass(slots=True)
class UnheardDispatches:
    """A router's dispatches that the agent's heartbeats cannot have counted yet.

    A heartbeat carries an agent's tasks in flight; the loads a router refreshes from the
    last one it heard would drop a task dispatched after that heartbeat was taken, and the
    next task would go to the same agent (herding). Each dispatch is kept, with when it was
    made (epoch ms), until a heartbeat taken after it, its outcome, or a lease's length.
    """

    _sent: dict[str, list[int]] = field(default_factory=dict)

    def __contains__(self, agent_id: str) -> bool:
        return agent_id in self._sent

    def sent(self, agent_id: str, at_ms: int) -> None:
        self._sent.setdefault(agent_id, []).append(at_ms)

    def ended(self, agent_id: str) -> None:
        """One of this router's tasks at `agent_id` ended (its outcome arrived)."""
        sent = self._sent.get(agent_id)
        if sent:
            sent.pop(0)

    def count(self, agent_id: str, heard_ms: int, now_ms: int, lease_ms: int) -> int:
        """Dispatches to `agent_id` made after its last heartbeat was taken (`heard_ms`)
        and within the last `lease_ms` (a later heartbeat must have come by then)."""
        sent = self._sent.get(agent_id)
        if not sent:
            return 0
        since = max(heard_ms, now_ms - lease_ms)
        sent[:] = [t for t in sent if t > since]
        if not sent:
            del self._sent[agent_id]
        return len(sent)
