"""What a router learns from outcomes on `mesh.events`.

A worker publishes a task's outcome with the tag of the router that dispatched it as the
routing key's last word (``task.completed.<tag>``), and each router binds only its own tag:
its work grows with the tasks it routes, not with the whole mesh's. It counts them (success
rate, cold-start state, circuit breakers), writes their Redis records once for the whole
mesh, and tells the other routers its counts in one ``route.counts`` event every
`mesh.router.keeper.COUNTS_INTERVAL_S`, so every router keeps the same counts per agent.
Outcomes with no tag (a router ended the task, or no router dispatched it) reach every
router, each counting them itself.

Nothing here waits on Redis in the decision path: a dispatch's routing record and each
outcome are queued and written by `flush()` in one pipelined round trip for many tasks,
off the hot path. A flush returns the texts Redis sampled into a reservoir slot; the
selector applies each to its index (one row) and tells the other routers
(``route.learned``), so none of them reloads anything.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.typing import EncodableT, FieldT

from mesh.connection import MeshConnection
from mesh.router.breaker import BreakerBoard
from mesh.router.feedback import ROUTE_RECORD_TTL_S
from mesh.router.memory import ExampleMemory, Kind, Memory, Outcome, success_rate
from mesh.schemas import Event, TaskEnvelope

if TYPE_CHECKING:
    from mesh.router.coldstart import ColdStartQuota

#: dispatched tasks remembered locally for learning from their outcome
RECENT_LIMIT = 50_000
#: outcome event types, and how each counts
OUTCOME_KINDS: dict[str, Kind] = {
    "task.completed": "completed",
    "task.failed": "failed",
    "task.expired": "failed",
    "task.rerouting": "rejected",  # only when the worker says it rejected the task
}
#: a text one router learned, announced to the others (slot, text and vector)
LEARNED_EVENT = "route.learned"
#: the outcomes one router counted since its last flush, announced to the others
COUNTS_EVENT = "route.counts"
#: the events a router follows to learn (besides its own tagged outcomes, `own_outcomes`)
LEARNING_EVENTS: tuple[str, ...] = (*OUTCOME_KINDS, "route.feedback", LEARNED_EVENT, COUNTS_EVENT)
#: at most this many outcomes of one kind per agent of a ``route.counts`` reach a breaker
#: (its window needs no more to decide)
MAX_APPLIED_PER_KIND = 1_000
#: outcomes that say nothing about the agent (the task expired before it ran)
NOT_THE_AGENTS_FAULT = frozenset({"expired_in_queue"})


def own_outcomes(tag: str) -> tuple[str, ...]:
    """Binding keys of the outcome events of the tasks the router tagged `tag` dispatched."""
    return tuple(f"{kind}.{tag}" for kind in OUTCOME_KINDS)


@dataclass(frozen=True, slots=True)
class _Dispatched:
    agent_id: str
    text: str
    rerouted: bool
    #: its text is learned when it completes (the router chose the agent: not a target)
    learns: bool = True


@dataclass(frozen=True, slots=True)
class Learned:
    """A text Redis put into slot `slot` of `agent_id`'s reservoir, from task `task_id`
    (whose routing record vouches for it to the other routers)."""

    agent_id: str
    slot: int
    text: str
    task_id: str = ""


class OutcomeLedger:
    """Counts, breakers and the example memory, kept in step with outcome events."""

    def __init__(self, conn: MeshConnection, memory: ExampleMemory, breakers: BreakerBoard) -> None:
        self.conn = conn
        self.memory = memory
        self.breakers = breakers
        self.counts: dict[str, dict[str, int]] = {}
        #: the cold agents' quota counters, written with the rest (`mesh.router.coldstart`)
        # imported here: the observer imports this module for its outcome kinds, and an
        # install without the router extra has no numpy, which the quota's scoring needs
        from mesh.router.coldstart import ColdStartQuota

        self.quota: ColdStartQuota = ColdStartQuota(conn.redis, conn.keys)
        self._recent: OrderedDict[str, _Dispatched] = OrderedDict()
        #: writes waiting for the next `flush`
        self._routes: list[tuple[str, _Dispatched]] = []
        self._outcomes: list[Outcome] = []
        #: own outcomes counted since the last `take_counts`: agent -> kind -> n ("fault":
        #: the failures its breaker counts)
        self._counted: dict[str, dict[str, int]] = {}

    @property
    def pending(self) -> bool:
        return self.writes_pending or self.counts_pending

    @property
    def writes_pending(self) -> bool:
        """Something waits for `flush` (routing records, outcomes, quota counters)."""
        return bool(self._routes or self._outcomes or self.quota.pending)

    @property
    def counts_pending(self) -> bool:
        """Own outcomes wait for `take_counts` (the next ``route.counts``)."""
        return bool(self._counted)

    def remember(self, envelope: TaskEnvelope, agent_id: str, *, learns: bool = True) -> None:
        """A task this router sent to `agent_id` (its text is learned if it completes, unless
        not `learns`: a target, which the caller chose)."""
        rerouted = envelope.reroutes > 0 or bool(envelope.excluded_agents)
        mine = _Dispatched(agent_id, envelope.capability, rerouted, learns)
        self._recent[envelope.task_id] = mine
        while len(self._recent) > RECENT_LIMIT:
            self._recent.popitem(last=False)
        self._routes.append((envelope.task_id, mine))

    def observe(self, event: Event, *, own: bool = False) -> str | None:
        """Take in one outcome event; returns the agent whose standing changed (None: none).

        `own`: it came tagged for this router, whose count the others get from
        `take_counts`. The Redis record of an outcome of this router's own dispatch is
        queued for `flush`.
        """
        agent_id = event.agent_id
        if agent_id is None or event.task_id is None:
            return None
        kind = OUTCOME_KINDS.get(event.type)
        if kind is None or (kind == "rejected" and "rejected" not in event.data):
            return None
        fault = kind == "failed" and event.data.get("error") not in NOT_THE_AGENTS_FAULT
        if kind == "completed":
            self.breakers.record(agent_id, True)
        elif fault:
            self.breakers.record(agent_id, False)
        counts = self.counts.setdefault(agent_id, {})
        counts[kind] = counts.get(kind, 0) + 1
        if own:
            counted = self._counted.setdefault(agent_id, {})
            counted[kind] = counted.get(kind, 0) + 1
            if fault:
                counted["fault"] = counted.get("fault", 0) + 1
        mine = self._recent.pop(event.task_id, None)
        if mine is not None and mine.agent_id == agent_id:
            learns = kind == "completed" and mine.learns and not mine.rerouted
            learn_text = mine.text if learns else None
            self._outcomes.append(Outcome(agent_id, event.task_id, kind, learn_text))
        return agent_id

    async def flush(self) -> list[Learned]:
        """Write what is queued: the cold-start counts, the routing records and the
        outcomes, one pipelined round trip each (per flush, not per task).

        Returns the texts that took a reservoir slot; texts not sampled or already held
        change nothing, so they cost nothing more.
        """
        routes, self._routes = self._routes, []
        outcomes, self._outcomes = self._outcomes, []
        await self.quota.flush()
        if routes:
            pipe = self.conn.redis.pipeline(transaction=False)
            for task_id, d in routes:
                key = self.conn.keys.outcome(task_id)
                record: dict[FieldT, EncodableT] = {
                    "agent_id": d.agent_id,
                    "text": d.text,
                    "rerouted": int(d.rerouted),
                }
                pipe.hset(key, mapping=record)
                pipe.expire(key, ROUTE_RECORD_TTL_S)
            await pipe.execute()
        answers = await self.memory.record_many(outcomes)
        return [
            Learned(o.agent_id, slot, o.learn_text, o.task_id)
            for o, slot in zip(outcomes, answers, strict=True)
            if slot >= 0 and o.learn_text is not None
        ]

    def take_counts(self) -> dict[str, dict[str, int]]:
        """The own outcomes counted since the last call, for ``route.counts``."""
        counted, self._counted = self._counted, {}
        return counted

    def apply_counts(self, counted: object) -> list[str]:
        """Another router's ``route.counts``: its outcomes, counted here too (breakers
        included); returns the agents whose standing changed. What is not a count is
        skipped."""
        if not isinstance(counted, dict):
            return []
        changed = []
        for agent_id, kinds in counted.items():
            if not isinstance(agent_id, str) or not isinstance(kinds, dict):
                continue
            n = {k: v for k, v in kinds.items() if isinstance(v, int) and v > 0}
            counts = self.counts.setdefault(agent_id, {})
            for kind in ("completed", "failed", "rejected"):
                if kind in n:
                    counts[kind] = counts.get(kind, 0) + n[kind]
            for _ in range(min(n.get("completed", 0), MAX_APPLIED_PER_KIND)):
                self.breakers.record(agent_id, True)
            for _ in range(min(n.get("fault", 0), MAX_APPLIED_PER_KIND)):
                self.breakers.record(agent_id, False)
            changed.append(agent_id)
        return changed

    def merge(self, agent_id: str, memory: Memory) -> None:
        """Counters loaded from Redis (a restart) raise the local ones, never lower them."""
        counts = self.counts.setdefault(agent_id, {})
        for kind in ("completed", "failed", "rejected", "good", "bad"):
            counts[kind] = max(counts.get(kind, 0), getattr(memory, kind))

    def success_rate(self, agent_id: str) -> float:
        c = self.counts.get(agent_id, {})
        good = c.get("completed", 0) + c.get("good", 0)
        return success_rate(good, c.get("failed", 0) + c.get("rejected", 0) + c.get("bad", 0))

    def completed(self, agent_id: str) -> int:
        return self.counts.get(agent_id, {}).get("completed", 0)

    def outcomes(self) -> int:
        """Outcomes counted so far, over every agent."""
        return sum(sum(c.values()) for c in self.counts.values())
