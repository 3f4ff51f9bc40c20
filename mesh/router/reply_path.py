"""Whose Result a router may answer with: chosen once per process, by access control.

Without access control a worker answers its callers itself and the router's stored copy
is the Result (`DirectPath`). Under access control (`SealedPath`) a router seeds each task
in the view of the agent it dispatches to before the dispatch (the agent's workers claim
and commit there, and may touch nothing of the mesh's records): a new task with its
submission, in the same Redis step (`seed_until`), any later dispatch on its own
(`dispatching`: `TaskStore.seed`), and
answers a resubmitted task with the Result that agent's worker sealed under its own keys
(see `mesh.router.results`).
"""

from __future__ import annotations

from typing import Protocol

from mesh.config import Settings
from mesh.dispatch.store import TaskStore
from mesh.schemas import Result, TaskEnvelope, now_ms


class ReplyPath(Protocol):
    def seed_until(self, envelope: TaskEnvelope) -> int | None:
        """The end of `envelope`'s lifetime when its submission seeds its first dispatch
        (`TaskStore.submit`), else None (nothing to seed)."""

    async def dispatching(self, envelope: TaskEnvelope, agent_id: str) -> None:
        """Before a dispatch of `envelope` to `agent_id` is published."""

    async def answer_of(self, stored: Result) -> Result:
        """The Result to answer a resubmission of a finished task with."""


class DirectPath:
    def seed_until(self, envelope: TaskEnvelope) -> int | None:
        return None

    async def dispatching(self, envelope: TaskEnvelope, agent_id: str) -> None:
        return None

    async def answer_of(self, stored: Result) -> Result:
        return stored


class SealedPath:
    def __init__(self, store: TaskStore, lifetime_s: float) -> None:
        self.store = store
        self.lifetime_ms = int(lifetime_s * 1000)

    def seed_until(self, envelope: TaskEnvelope) -> int:
        return (envelope.created_ms or now_ms()) + self.lifetime_ms

    async def dispatching(self, envelope: TaskEnvelope, agent_id: str) -> None:
        await self.store.seed(envelope, agent_id, self.seed_until(envelope))

    async def answer_of(self, stored: Result) -> Result:
        """The Result an agent's worker sealed for the task, else `stored` (a task the mesh
        ended itself has no sealed copy)."""
        task_id = stored.task_id
        for agent_id in sorted(await self.store.dispatched_agents(task_id)):
            sealed = await self.store.sealed_result(agent_id, task_id)
            if sealed is not None:
                return sealed
        return stored


def reply_path_for(settings: Settings, store: TaskStore) -> ReplyPath:
    if settings.access_control:
        return SealedPath(store, settings.max_task_lifetime_s)
    return DirectPath()


__all__ = ["DirectPath", "ReplyPath", "SealedPath", "reply_path_for"]
