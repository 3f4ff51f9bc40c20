"""What a router's steps need, as one small frozen object built once per router.

`RouterDeps` is to the router what `mesh.worker.deps.WorkerDeps` is to a worker: the
publisher, the task store, the topology, the settings, the selector, and the choices made
once at start (the guard, the reply path, the hooks), so no step asks "is access control
on?" or "are metrics on?" per task. Nothing here imports a step: the steps import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mesh.config import Settings
from mesh.dispatch.events import emit_states
from mesh.dispatch.store import TaskStore
from mesh.hooks import Hooks
from mesh.messaging import Publisher
from mesh.retrying import with_retries
from mesh.router.reply_path import ReplyPath
from mesh.schemas import Result, TaskEnvelope
from mesh.topology import DeadReason, Topology

if TYPE_CHECKING:
    from mesh.router.guard import Guard
    from mesh.router.plan import Selector


@dataclass(frozen=True, slots=True)
class RouterDeps:
    router_id: str
    settings: Settings
    topology: Topology
    publisher: Publisher
    store: TaskStore
    selector: Selector
    guard: Guard
    replies: ReplyPath
    hooks: Hooks
    #: what this router's dispatches carry in ``route.router`` (`Selector.outcome_tag`)
    outcome_tag: str | None = None
    #: its ``route.decision`` events leave the request text out (`redacts_decisions`)
    redact_decisions: bool = False

    async def emit(
        self,
        envelope: TaskEnvelope,
        states: Iterable[str] | None,
        data: dict[str, Any] | None = None,
        agent_id: str | None = None,
    ) -> None:
        """``task.<state>`` events of `envelope` (progress states only when enabled)."""
        await emit_states(
            self.publisher,
            states,
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            agent_id=agent_id,
            data=data,
        )

    async def reply(self, waiter: str | None, result: Result) -> None:
        await with_retries(lambda: self.publisher.reply(waiter, result))

    async def dead_letter(
        self,
        reason: DeadReason,
        body: bytes,
        *,
        details: Mapping[str, Any] | None = None,
        task_id: str | None = None,
    ) -> None:
        if await self.publisher.dead_letter(reason, body, details=details, task_id=task_id):
            self.hooks.dead_lettered(reason)


__all__ = ["RouterDeps"]
