"""Cold start as a quota: a new agent gets at least a share of the tasks it is close on.

An agent is *cold* until it has completed ``MESH_COLD_START_COMPLETIONS`` tasks (counted by
every router: `OutcomeLedger`). A cold agent *contends* for a task when it is available,
matches the required tags and is within ``MESH_COLD_START_MARGIN`` of the task's best
eligible candidate: its confidence (similarity plus keyword part) is at least the
threshold less the margin (just below the threshold counts), and its total is at least
the best's less the margin. Its best candidate wins every such task on scoring alone, and
without a quota a new agent whose texts sit close to an established one's never gets a
task to learn from.

Each cold agent has two counters: ``seen``, the dispatched tasks it contended for, and
``given``, how many of those it got. A decision gives the task to the best-scoring
contender owed one: ``given + 1 <= MESH_EXPLORATION_SHARE * (seen + 1)``. With 0.05 it
gets the 20th, 40th, 60th, ... of the tasks it is close on, 5 of every 100 (strategy
``explore``, the route says ``exploration``); the 19 before each go to the best, so a
fresh mesh routes on scores first. A task with no eligible agent
follows the usual fallbacks (bids, fallback agent, a person): the quota never lowers the
threshold to give a task nobody clears.

The counters are the mesh's, not one router's: each router counts its decisions locally
and adds them to Redis (`Keys.cold_start`, HINCRBY) in its ledger flush, off the decision
path, reading the totals back, so every router sees what the others gave.
A router that has not yet written an agent's counters starts from its own (it reads the
mesh's totals with its first write), so a new router gives no more than the share early.
`score` reads a `QuotaView`; `SemanticSelector.dispatched` records a dispatched decision
(`mesh explain` and multi-intent detection score without recording; an undelivered
dispatch counts for nothing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
from numpy.typing import NDArray

if TYPE_CHECKING:
    from redis.asyncio import Redis

    from mesh.keys import Keys

__all__ = ["COUNTERS_TTL_S", "ColdStartQuota", "QuotaView", "contenders", "owed"]

F32 = NDArray[np.float32]
#: a cold agent's counters outlive its last contended task by this long
COUNTERS_TTL_S = 7 * 24 * 3600
#: float slack of the quota's comparison (0.05 * 20 is 1)
_EPS = 1e-9


class QuotaView(Protocol):
    """What scoring reads of the quota: a cold agent's counters (seen, given)."""

    def counts(self, agent_id: str) -> tuple[int, int]: ...


def contenders(
    completed: NDArray[np.int64],
    confidence: F32,
    total: F32,
    code: NDArray[np.int8],
    best: int,
    *,
    threshold: float,
    margin: float,
    completions: int,
) -> NDArray[np.intp]:
    """Rows of the cold agents close to row `best` (the best eligible one, itself included
    when cold), best total first."""
    cold = completed < completions
    if not cold.any():
        return np.empty(0, np.intp)
    near = np.flatnonzero(confidence >= np.float32(threshold - margin))
    near = near[(code[near] == 0) | (code[near] == 3)]  # available, tags match
    near = near[completed[near] < completions]
    near = near[total[near] >= total[best] - np.float32(margin)]
    out: NDArray[np.intp] = near[np.argsort(-total[near], kind="stable")]
    return out


def owed(
    quota: QuotaView, ids: Sequence[str], rows: NDArray[np.intp], best: int, share: float
) -> int | None:
    """The first row of `rows` (not `best`) owed this task: given + 1 <= share * (seen + 1)."""
    for row in rows.tolist():
        if row == best:
            continue
        seen, given = quota.counts(ids[row])
        if given + 1 <= share * (seen + 1) + _EPS:
            return int(row)
    return None


class ColdStartQuota:
    """The quota counters of the cold agents, shared by the routers through Redis."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        #: the totals Redis last answered, per agent: [seen, given]
        self._base: dict[str, list[int]] = {}
        #: counted here, being written / not yet written
        self._flight: dict[str, list[int]] = {}
        self._pending: dict[str, list[int]] = {}

    def counts(self, agent_id: str) -> tuple[int, int]:
        seen = given = 0
        for table in (self._base, self._flight, self._pending):
            pair = table.get(agent_id)
            if pair is not None:
                seen, given = seen + pair[0], given + pair[1]
        return seen, given

    def record(self, contested: Sequence[str], chosen: str | None) -> None:
        """A decision acted on: each agent of `contested` was close on the task, and
        `chosen` got it."""
        for agent_id in contested:
            pair = self._pending.setdefault(agent_id, [0, 0])
            pair[0] += 1
            if agent_id == chosen:
                pair[1] += 1

    @property
    def pending(self) -> bool:
        return bool(self._pending)

    async def flush(self) -> None:
        """Add the local counts to Redis and take the mesh's totals back."""
        if not self._pending:
            return
        self._flight, self._pending = self._pending, {}
        agents = list(self._flight)
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for agent_id in agents:
                    key = self.keys.cold_start(agent_id)
                    seen, given = self._flight[agent_id]
                    pipe.hincrby(key, "seen", seen)
                    pipe.hincrby(key, "given", given)
                    pipe.expire(key, COUNTERS_TTL_S)
                reply = await pipe.execute()
        except BaseException:
            for agent_id, (seen, given) in self._flight.items():  # written next time
                pair = self._pending.setdefault(agent_id, [0, 0])
                pair[0] += seen
                pair[1] += given
            self._flight = {}
            raise
        for n, agent_id in enumerate(agents):
            self._base[agent_id] = [int(reply[3 * n]), int(reply[3 * n + 1])]
        self._flight = {}
