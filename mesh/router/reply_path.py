"""Whose Result a router may answer with: chosen once per process, by access control.

Without access control a worker answers its callers itself and the router's stored copy
is the Result (`DirectPath`). Under access control (`SealedPath`) a router records which
agents it dispatched each task to before the dispatch, and answers a resubmitted task with
the Result that agent's worker sealed under its own keys: the stored copy is writable by
any worker's Redis user (see `mesh.router.results`).
"""

from __future__ import annotations

from typing import Protocol

from mesh.config import Settings
from mesh.dispatch.store import TaskStore
from schemas import Result


class ReplyPath(Protocol):
    async def dispatching(self, task_id: str, agent_id: str) -> None:
        """Before a dispatch of `task_id` to `agent_id` is published."""

    async def answer_of(self, stored: Result) -> Result:
        """The Result to answer a resubmission of a finished task with."""


class DirectPath:
    async def dispatching(self, task_id: str, agent_id: str) -> None:
        return None

    async def answer_of(self, stored: Result) -> Result:
        return stored


class SealedPath:
    def __init__(self, store: TaskStore) -> None:
        self.store = store

    async def dispatching(self, task_id: str, agent_id: str) -> None:
        await self.store.record_dispatch(task_id, agent_id)

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
    return SealedPath(store) if settings.access_control else DirectPath()


__all__ = ["DirectPath", "ReplyPath", "SealedPath", "reply_path_for"]
