"""What a task's context and the settler need, as small frozen objects (not the runtime).

`TaskDeps` serves `TaskContext`: effects, shared context, fencing and handoffs behind
protocols, so `WorkerRuntime` passes Redis- and broker-backed ones and `mesh.testing`
in-memory ones. `WorkerDeps` adds what settling a delivery takes (task store, publisher,
replied marks). Nothing here imports the runtime: `mesh/worker/` has no import cycle.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mesh.config import Settings
from mesh.dispatch.store import Holder, ReplyMarks, TaskStore
from mesh.keys import Keys
from mesh.messaging import Publisher
from mesh.schemas import Result, TaskEnvelope
from mesh.topology import Topology

if TYPE_CHECKING:
    from mesh.hooks import Hooks


class EffectStore(Protocol):
    """Side-effect counters applied at most once per task, under the fencing check."""

    async def apply_once(self, task_id: str, holder: Holder, name: str, amount: int = 1) -> int:
        """1 applied, 0 applied before by this task, -1 refused (stale token)."""


class ContextBackend(Protocol):
    """Versioned shared context of a trace, by reference."""

    async def load(self, ref: str) -> dict[str, Any]: ...

    async def save(self, trace_id: str, data: dict[str, Any]) -> str: ...


class Fence(Protocol):
    """The fencing check of a membership."""

    async def check(self, token: int) -> None:
        """Raise `StaleFencingToken` unless `token` is still current."""


class HandoffClient(Protocol):
    """Publishes a child task and waits for its Result."""

    async def send(self, envelope: TaskEnvelope, *, wait_s: float | None = None) -> Result: ...


@dataclass(frozen=True, slots=True)
class TaskDeps:
    """Everything a `TaskContext` uses, for every task of one worker instance."""

    agent_id: str
    instance_id: str
    settings: Settings
    keys: Keys
    effects: EffectStore
    contexts: ContextBackend
    fence: Fence
    #: the client handoffs go through (opened on first use)
    client: Callable[[], Awaitable[HandoffClient]]
    #: the worker's hooks once started (spans, metrics: `mesh.hooks`)
    hooks: Callable[[], Hooks] = lambda: _no_hooks()


@dataclass(frozen=True, slots=True)
class WorkerDeps:
    """What the `Settler` uses: the task's side plus the records and the wire."""

    task: TaskDeps
    topology: Topology
    store: TaskStore
    publisher: Publisher
    replied: ReplyMarks

    @property
    def agent_id(self) -> str:
        return self.task.agent_id

    @property
    def instance_id(self) -> str:
        return self.task.instance_id

    @property
    def settings(self) -> Settings:
        return self.task.settings


def _no_hooks() -> Hooks:
    from mesh.hooks import NO_HOOKS

    return NO_HOOKS


__all__ = ["ContextBackend", "EffectStore", "Fence", "HandoffClient", "TaskDeps", "WorkerDeps"]
