"""Hooks around a task: ``WorkerMiddleware.around_task(run, call_next)`` (habit 11).

The runtime claims a delivery, then runs its chain: the built-in `LoopAlertMiddleware`,
then `DeadlineMiddleware`, then the worker's own middleware in the order given, then the
handler. A hook sees the claim (`TaskRun.takeover`, `TaskRun.visits`), the task's context
and the `Outcome` that comes back, so metrics need no edit of the runtime::

    class Timing(WorkerMiddleware):
        async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
            start = time.monotonic()
            outcome = await call_next(run)
            histogram.observe(time.monotonic() - start, outcome.kind)
            return outcome

A hook may raise `mesh.Retry` or `mesh.Reject` (or another `MeshError`): the task's outcome
then says so, as if the handler had raised it. A hook failing with anything else is a bug
in the hook: logged at CRITICAL with its name, and the task goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mesh.errors import MeshError
from mesh.payload_schema import checker, describe, field_errors
from mesh.schemas import Event, Registration, TaskEnvelope
from mesh.worker.context import TaskContext
from mesh.worker.outcome import BAD_OUTPUT, Outcome, check_output, outcome_of_error

if TYPE_CHECKING:
    from mesh.metrics.core import Metrics
    from mesh.worker.agent import Agent

logger = logging.getLogger(__name__)

#: a trace visiting the same agent more often than this raises `alert.loop`
LOOP_VISITS = 2


@dataclass(slots=True)
class TaskRun:
    """One claimed task on its way through the chain."""

    envelope: TaskEnvelope
    ctx: TaskContext
    #: the handler is cancelled after this long at most (`max_task_lifetime_s`)
    lifetime_ms: int
    #: this claim took the task over from an instance whose lease lapsed
    takeover: bool = False
    #: visits of the task's trace to this agent, this one included (0: not counted)
    visits: int = 0
    #: whether the handler was called (False: a hook ended the task before it)
    executed: bool = False
    #: free room for hooks to pass data along (metrics labels, spans)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def task_id(self) -> str:
        return self.envelope.task_id


CallNext = Callable[[TaskRun], Awaitable[Outcome]]
Handler = Callable[[TaskEnvelope, TaskContext], Awaitable[Any]]


class WorkerMiddleware:
    """Base class of a hook around each task; the default passes the task on unchanged."""

    @property
    def name(self) -> str:
        return type(self).__name__

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        return await call_next(run)


class DeadlineMiddleware(WorkerMiddleware):
    """Expire a task whose deadline passed in the queue; cancel the rest at
    min(deadline, max task lifetime): ``expired`` (or failed ``lifetime_exceeded``)."""

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        left_ms = run.ctx.time_left_ms()
        if left_ms <= 0:
            return Outcome(
                "expired",
                code="expired_in_queue",
                message="the task's deadline passed while it waited in the queue; not executed",
                details={"deadline_ms": run.envelope.deadline_ms},
            )
        limit_ms = min(left_ms, run.lifetime_ms)
        try:
            async with asyncio.timeout(limit_ms / 1000.0) as scope:
                return await call_next(run)
        except TimeoutError as exc:
            if not scope.expired():
                return Outcome("retry", message=f"{type(exc).__name__}: {exc}")
            if limit_ms < left_ms:
                return Outcome(
                    "failed",
                    code="lifetime_exceeded",
                    message=f"cancelled after max_task_lifetime_s={run.lifetime_ms / 1000:g}",
                )
            return Outcome(
                "expired",
                code="deadline_passed",
                message="the handler was cancelled at the task's deadline",
            )


class LoopAlertMiddleware(WorkerMiddleware):
    """Loop detection: the same trace on the same agent more than twice emits ``alert.loop``."""

    def __init__(self, emit: Callable[[Event], Awaitable[None]]) -> None:
        self.emit = emit

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        if run.visits > LOOP_VISITS:
            envelope, ctx = run.envelope, run.ctx
            logger.warning(
                "loop: trace_id=%s visited agent=%s %d times",
                envelope.trace_id,
                ctx.agent_id,
                run.visits,
            )
            await self.emit(
                Event(
                    type="alert.loop",
                    trace_id=envelope.trace_id,
                    task_id=envelope.task_id,
                    agent_id=ctx.agent_id,
                    instance_id=ctx.instance_id,
                    data={
                        "visits": run.visits,
                        "trajectory": [*envelope.trajectory, ctx.agent_id],
                        "hops": envelope.hops,
                    },
                )
            )
        return await call_next(run)


class MetricsMiddleware(WorkerMiddleware):
    """Handler time by outcome (`Metrics.handled`), when the handler was called.

    Built in when the worker has metrics, outside `DeadlineMiddleware` so that a handler
    cancelled at its deadline counts too (as ``expired``); the worker's own middleware
    runs inside it and is timed with the handler.
    """

    def __init__(self, metrics: Metrics, agent_id: str) -> None:
        self.metrics = metrics
        self.agent_id = agent_id

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        started = time.perf_counter()
        outcome = await call_next(run)
        if run.executed:
            self.metrics.handled(self.agent_id, outcome.kind, time.perf_counter() - started)
        return outcome


class ContractMiddleware(WorkerMiddleware):
    """The agent's contract (`mesh.payload_schema`): a payload that does not fit its input
    schema fails ``bad_payload`` before the handler runs (naming each bad field); an output
    that does not fit its output schema fails ``bad_handler_output`` before it is
    committed. Built in only for an agent that declares a contract."""

    def __init__(self, agent_id: str, registration: Registration) -> None:
        self.agent_id = agent_id
        self.inputs = checker(registration.input_schema)
        self.outputs = checker(registration.output_schema)

    @classmethod
    def of(cls, agent: Agent) -> list[WorkerMiddleware]:
        """[the hook] when `agent` declares a contract, else []."""
        registration = agent.registration(f"{agent.agent_id}-contract")
        if registration.input_schema is None and registration.output_schema is None:
            return []
        return [cls(agent.agent_id, registration)]

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        errors = field_errors(self.inputs, run.envelope.payload)
        if errors:
            return Outcome(
                "failed",
                code="bad_payload",
                message=f"the payload does not fit agent {self.agent_id}'s input schema: "
                f"{describe(errors)}",
                details={"errors": errors},
            )
        outcome = await call_next(run)
        if outcome.kind == "completed" and self.outputs is not None:
            errors = field_errors(self.outputs, outcome.output or {})
            if errors:
                return Outcome(
                    "failed",
                    code=BAD_OUTPUT,
                    message=f"the handler's output does not fit agent {self.agent_id}'s "
                    f"output schema: {describe(errors)}",
                    details={"errors": errors},
                )
        return outcome


def handler_step(handler: Handler, *, expose_errors: bool = False) -> CallNext:
    """The end of the chain: call `handler` and turn what it did into an `Outcome` (its
    exception text unredacted with `expose_errors`: `Agent.expose_errors`)."""

    async def call(run: TaskRun) -> Outcome:
        run.executed = True
        try:
            output = await handler(run.envelope, run.ctx)
        except Exception as exc:
            return outcome_of_error(exc, run.task_id, expose=expose_errors)
        return check_output(output, run.ctx.max_output_bytes)

    return call


def chain(middleware: Sequence[WorkerMiddleware], last: CallNext) -> CallNext:
    """`middleware` around `last`, the first one outermost."""
    call = last
    for hook in reversed(middleware):
        call = _guarded(hook, call)
    return call


def _guarded(hook: WorkerMiddleware, call_next: CallNext) -> CallNext:
    async def call(run: TaskRun) -> Outcome:
        inner: list[Outcome] = []
        called = False

        async def recorded(r: TaskRun) -> Outcome:
            nonlocal called
            called = True
            outcome = await call_next(r)
            inner.append(outcome)
            return outcome

        try:
            return await hook.around_task(run, recorded)
        except MeshError as exc:
            return outcome_of_error(exc, run.task_id)
        except Exception:
            logger.critical(
                "worker middleware %s failed task_id=%s; the task goes on without it",
                hook.name,
                run.task_id,
                exc_info=True,
            )
            if inner:
                return inner[-1]
            if called:  # the rest of the chain raised through the hook: never run twice
                raise
            return await call_next(run)

    return call


__all__ = [
    "LOOP_VISITS",
    "CallNext",
    "ContractMiddleware",
    "DeadlineMiddleware",
    "LoopAlertMiddleware",
    "MetricsMiddleware",
    "TaskRun",
    "WorkerMiddleware",
    "chain",
    "handler_step",
]
