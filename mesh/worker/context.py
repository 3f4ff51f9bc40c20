"""`TaskContext`: what a handler can see and do while it runs one task."""

from __future__ import annotations

import logging
import time
from functools import cached_property
from typing import Any

from mesh.dispatch.context import parse_ref
from mesh.dispatch.store import Holder
from mesh.errors import ContextNotFound, DownstreamBusy, EffectUnknown, StaleFencingToken
from mesh.results import error_result
from mesh.schemas import Result, TaskEnvelope, now_ms
from mesh.worker.deps import TaskDeps

#: a handoff gets at most this share of the time left to the parent's deadline
HANDOFF_SHARE = 0.5
#: extra wait beyond a handoff's deadline for its Result to travel back
HANDOFF_REPLY_MARGIN_S = 2.0


class TaskContext:
    """Handed to every handler call next to the task envelope."""

    def __init__(self, deps: TaskDeps, envelope: TaskEnvelope, holder: Holder) -> None:
        self._deps = deps
        self.envelope = envelope
        self.holder = holder
        self.agent_id = deps.agent_id
        self.instance_id = deps.instance_id
        self.token = holder.token
        #: the trace's shared context as this hop sees it; `save_context` moves it on
        self.context_ref = envelope.context_ref
        #: `time.monotonic()` of the handler's last sign of life (`progress`)
        self.last_progress = time.monotonic()

    @cached_property
    def logger(self) -> logging.LoggerAdapter[logging.Logger]:
        """``mesh.agent.<agent_id>``, each line with the task's task_id and trace_id (made
        on first use: most handlers log nothing)."""
        return logging.LoggerAdapter(
            logging.getLogger(f"mesh.agent.{self.agent_id}"),
            {"task_id": self.envelope.task_id, "trace_id": self.envelope.trace_id},
        )

    def progress(self) -> None:
        """Say the handler is alive on long work: its processing timeout
        (`Agent.processing_timeout_s`) counts again from now."""
        self.last_progress = time.monotonic()

    @property
    def task_id(self) -> str:
        return self.envelope.task_id

    @property
    def trace_id(self) -> str:
        return self.envelope.trace_id

    @property
    def max_output_bytes(self) -> int:
        """The largest output this worker sends back (``MESH_MAX_PAYLOAD_BYTES``)."""
        return self._deps.settings.max_payload_bytes

    # A handler gets no Redis client and no settings object: what it may do to the mesh's
    # state goes through the methods below (`apply_once`, `fence`, the trace's context,
    # `handoff`), under the worker's own ACL user. State of its own it keeps itself.

    def time_left_ms(self) -> int:
        """Milliseconds until the task's deadline (negative once it has passed)."""
        deadline = self.envelope.deadline_ms
        if deadline is None:
            return self.envelope.timeout_ms
        return deadline - now_ms()

    async def fence(self) -> None:
        """Raise `StaleFencingToken` if this instance's lease was lost since it took the task."""
        await self._deps.fence.check(self.token)

    async def apply_once(self, name: str, amount: int = 1) -> bool:
        """Add `amount` to the side-effect counter `name` at most once for this task.

        Atomic with the fencing check: a worker whose lease lapsed cannot apply it.
        Returns False when this task already applied it (a rerun after a crash).

        Raises:
            StaleFencingToken: this instance no longer holds the task's claim.
            EffectUnknown: the task's record was lost after it may have run (Redis restarted
                without persistence): not applied; the task fails with ``effect_unknown``.
        """
        applied = await self._deps.effects.apply_once(self.task_id, self.holder, name, amount)
        if applied == -2:
            raise EffectUnknown(self.task_id, name)
        if applied < 0:
            raise StaleFencingToken(self.agent_id, self.token, None)
        return applied == 1

    async def context(self) -> dict[str, Any]:
        """The trace's shared context at `context_ref` ({} when the task carries none).

        Under access control it is read in this agent's view: a version this agent saved,
        or the copy a router seeded there with the task (`mesh.dispatch.context`)."""
        if self.context_ref is None:
            return {}
        trace_id, _version = parse_ref(self.context_ref)
        if trace_id != self.trace_id:
            raise ContextNotFound(
                f"context_ref {self.context_ref!r} is another trace's, not {self.trace_id!r}'s: "
                "a task reads only the context of its own trace"
            )
        return await self._deps.contexts.load(self.context_ref)

    async def save_context(self, data: dict[str, Any]) -> str:
        """Store `data` as the trace's next context version; later handoffs carry its ref."""
        self.context_ref = await self._deps.contexts.save(self.trace_id, data)
        return self.context_ref

    async def handoff(
        self,
        capability: str,
        payload: dict[str, Any] | None = None,
        *,
        target: str | None = None,
        timeout_ms: int | None = None,
        **fields: Any,
    ) -> Result:
        """Pass work on and wait for its Result: same trace, one more hop, less time.

        The child gets at most half of the time left to this task's deadline (less if
        `timeout_ms` asks for less), this task as parent, the trajectory extended by this
        agent and the current `context_ref`. A task with no time left gets an ``expired``
        Result without publishing anything.

        Raises:
            DownstreamBusy: the target's circuit breaker is open; the router answered at
                once (catch it to answer with a degraded reply).
        """
        parent = self.envelope
        budget = int(self.time_left_ms() * HANDOFF_SHARE)
        if timeout_ms is not None:
            budget = min(budget, timeout_ms)
        child = TaskEnvelope(
            capability=capability,
            payload=payload or {},
            trace_id=parent.trace_id,
            parent_task_id=parent.task_id,
            hops=parent.hops + 1,
            max_hops=parent.max_hops,
            trajectory=[*parent.trajectory, self.agent_id],
            deadline_ms=now_ms() + budget,
            timeout_ms=max(100, budget),
            context_ref=self.context_ref,
            priority=parent.priority,
            target=target,
            source=self.agent_id,
            **fields,
        )
        if budget <= 0:
            return error_result(
                child, "expired", "no_time_left", "the parent task had no time left to hand off"
            )
        client = await self._deps.client()
        self.logger.info("handoff task_id=%s -> %s budget=%dms", child.task_id, target, budget)
        waiting = client.send(child, wait_s=budget / 1000.0 + HANDOFF_REPLY_MARGIN_S)
        hooks = self._deps.hooks()
        with hooks.handoff(child, self.agent_id, self.instance_id, budget):
            result = await waiting
            hooks.annotate(result.status, result.error.code if result.error else None)
        if result.error is not None and result.error.code == "downstream_busy":
            raise DownstreamBusy(target or capability, result.error.message)
        return result
