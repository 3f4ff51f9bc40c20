"""What a router learns from outcomes on `mesh.events`.

Every router follows the outcome events of the whole mesh, so each keeps the same counts
per agent (success rate, cold-start state) and feeds its circuit breakers. Only the router
that chose the agent for a task writes that task's outcome to Redis (the example memory
and its counters), once for the whole mesh; the others reload the memory when they refit.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from mesh.connection import MeshConnection
from mesh.router.breaker import BreakerBoard
from mesh.router.feedback import record_route
from mesh.router.memory import ExampleMemory, Kind, Memory, success_rate
from schemas import Event, TaskEnvelope

#: dispatched tasks remembered locally for learning from their outcome
RECENT_LIMIT = 50_000
#: outcome event types, and how each counts
OUTCOME_KINDS: dict[str, Kind] = {
    "task.completed": "completed",
    "task.failed": "failed",
    "task.expired": "failed",
    "task.rerouting": "rejected",  # only when the worker says it rejected the task
}
#: the events a router follows to learn
LEARNING_EVENTS: tuple[str, ...] = (*OUTCOME_KINDS, "route.feedback")
#: outcomes that say nothing about the agent (the task expired before it ran)
NOT_THE_AGENTS_FAULT = frozenset({"expired_in_queue"})


@dataclass(frozen=True, slots=True)
class _Dispatched:
    agent_id: str
    text: str
    rerouted: bool


class OutcomeLedger:
    """Counts, breakers and the example memory, kept in step with outcome events."""

    def __init__(self, conn: MeshConnection, memory: ExampleMemory, breakers: BreakerBoard) -> None:
        self.conn = conn
        self.memory = memory
        self.breakers = breakers
        self.counts: dict[str, dict[str, int]] = {}
        #: agents whose example memory in Redis changed since the router last loaded it
        self.memory_dirty: set[str] = set()
        self._recent: OrderedDict[str, _Dispatched] = OrderedDict()

    async def remember(self, envelope: TaskEnvelope, agent_id: str) -> None:
        """A task this router sent to `agent_id` (its text is learned if it completes)."""
        rerouted = envelope.reroutes > 0 or bool(envelope.excluded_agents)
        self._recent[envelope.task_id] = _Dispatched(agent_id, envelope.capability, rerouted)
        while len(self._recent) > RECENT_LIMIT:
            self._recent.popitem(last=False)
        await record_route(self.conn, envelope.task_id, agent_id, envelope.capability, rerouted)

    async def observe(self, event: Event) -> str | None:
        """Take in one event; returns the agent whose standing changed (None: nothing)."""
        agent_id = event.agent_id
        if agent_id is None or event.task_id is None:
            return None
        if event.type == "route.feedback":
            self.memory_dirty.add(agent_id)
            return agent_id
        kind = OUTCOME_KINDS.get(event.type)
        if kind is None or (kind == "rejected" and "rejected" not in event.data):
            return None
        if kind == "completed":
            self.breakers.record(agent_id, True)
        elif kind == "failed" and event.data.get("error") not in NOT_THE_AGENTS_FAULT:
            self.breakers.record(agent_id, False)
        counts = self.counts.setdefault(agent_id, {})
        counts[kind] = counts.get(kind, 0) + 1
        mine = self._recent.pop(event.task_id, None)
        if mine is not None and mine.agent_id == agent_id:
            learn_text = mine.text if kind == "completed" and not mine.rerouted else None
            await self.memory.record(agent_id, event.task_id, kind, learn_text=learn_text)
            if learn_text is not None:
                self.memory_dirty.add(agent_id)
        return agent_id

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
