"""The one place that turns a handler's outcome into AMQP actions (ack, reject, retry).

Handlers report outcomes by returning (completed) or raising: `Retry` or a transient error
(retried through `mesh.retry.<delay>`, at most `max_retries` times, then `mesh.dead.retries`),
`Reject` (dead-lettered back to the router, which tries the next candidate), a deadline
(`expired`), anything else (`failed`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aio_pika.abc import AbstractIncomingMessage

from mesh.dispatch.events import emit_states
from mesh.dispatch.store import Commit, Holder
from mesh.messaging import envelope_message
from mesh.results import error_result
from mesh.retrying import TRANSIENT_ERRORS as OUTAGE_ERRORS
from mesh.retrying import quietly, with_retries
from mesh.topology import DELAY_HEADER, DeadReason
from schemas import Result, TaskEnvelope
from schemas.codec import dumps, encode, json_problem

if TYPE_CHECKING:
    from mesh.worker.runtime import WorkerRuntime

logger = logging.getLogger(__name__)

#: error code of a handler output that cannot be sent (not a dict, not JSON, too large)
BAD_OUTPUT = "bad_handler_output"

#: errors a handler may raise that are worth another try (besides `mesh.Retry`)
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)

Kind = Literal["completed", "failed", "retry", "reject", "expired"]


@dataclass(slots=True)
class Outcome:
    kind: Kind
    output: dict[str, Any] | None = None
    code: str = ""
    message: str = ""
    delay_ms: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


async def settle(
    runtime: WorkerRuntime,
    message: AbstractIncomingMessage,
    envelope: TaskEnvelope,
    outcome: Outcome,
    timings: dict[str, float],
    holder: Holder,
) -> Result | None:
    """Carry out `outcome` for a task `holder` claimed; returns the Result sent, if any.

    Terminal outcomes are committed with the fencing check (one Lua step); only a commit
    that succeeds answers the callers, so a stale instance never double-answers.
    """
    publisher = runtime.publisher
    store = runtime.store
    topology = runtime.topology
    ids = {"agent_id": runtime.agent.agent_id, "instance_id": runtime.instance_id}
    by = runtime.instance_id
    if outcome.kind == "reject":
        logger.info("task_id=%s rejected: %s", envelope.task_id, outcome.message)
        await store.release(envelope.task_id, holder, "rerouting", by=by, note=outcome.message)
        await _emit(runtime, envelope, "rerouting", {"rejected": outcome.message[:500]})
        await quietly(message.reject(requeue=False))
        return None
    if outcome.kind == "retry" and envelope.attempt < runtime.settings.max_retries:
        attempt = envelope.attempt + 1
        delay = outcome.delay_ms or topology.retry_delay_for(attempt)
        delay = nearest_delay(topology.retry_delays_ms, delay)
        retried = envelope.model_copy(update={"attempt": attempt})
        exchange = await publisher.exchange(topology.retry)
        # the copy goes out (confirmed) before the claim is released and the original
        # acked: a crash in between leaves a duplicate, which the claim absorbs
        await with_retries(
            lambda: exchange.publish(
                envelope_message(
                    retried,
                    headers={
                        DELAY_HEADER: str(delay),
                        "x-mesh-last-error": outcome.message[:1000],
                    },
                ),
                routing_key=topology.agent_routing_key(runtime.agent.agent_id, envelope.priority),
                mandatory=False,
            )
        )
        await store.release(envelope.task_id, holder, "retrying", by=by, note=outcome.message)
        await quietly(message.ack())
        await _emit(
            runtime,
            envelope,
            "retrying",
            {"attempt": attempt, "delay_ms": delay, "error": outcome.message[:500]},
        )
        logger.info(
            "task_id=%s retry %d in %d ms: %s", envelope.task_id, attempt, delay, outcome.message
        )
        return None
    dead: tuple[DeadReason, bytes, dict[str, Any]] | None = None
    if outcome.kind == "completed":
        result = Result(
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            status="completed",
            output=outcome.output or {},
            timings=timings,
            hops=envelope.hops,
            route=envelope.route,
            **ids,
        )
    elif outcome.kind == "retry":
        details = {"attempts": envelope.attempt + 1, "last_error": outcome.message}
        result = error_result(
            envelope,
            "failed",
            "retries_exhausted",
            f"failed after {envelope.attempt + 1} attempts: {outcome.message}",
            details,
            timings=timings,
            **ids,
        )
        dead = ("retries", encode(envelope), details)
    elif outcome.kind == "expired":
        result = error_result(
            envelope,
            "expired",
            outcome.code or "deadline_passed",
            outcome.message,
            outcome.details,
            timings=timings,
            **ids,
        )
        if outcome.code == "expired_in_queue":
            dead = ("expired", message.body, outcome.details)
    else:
        result = error_result(
            envelope,
            "failed",
            outcome.code or "handler_error",
            outcome.message,
            outcome.details,
            timings=timings,
            **ids,
        )
    async def commit_result(result: Result) -> Commit:
        return await store.finish(
            result,
            result.status,
            by=by,
            holder=holder,
            note=result.error.code if result.error else "",
            agent_id=runtime.agent.agent_id,
        )

    try:
        commit = await commit_result(result)
    except OUTAGE_ERRORS:
        raise
    except Exception as exc:
        if result.status != "completed":
            raise
        # an output `check_output` let through but the codec or Redis refused: the caller
        # gets a failed Result saying so, and the delivery is settled as usual
        logger.error("task_id=%s: output not stored", envelope.task_id, exc_info=True)
        result = error_result(
            envelope,
            "failed",
            BAD_OUTPUT,
            f"the handler's output could not be stored: {type(exc).__name__}: {exc}"[:2000],
            None,
            timings=timings,
            **ids,
        )
        commit = await commit_result(result)
    if commit.status == "stale":
        # our lease lapsed and the claim may be someone else's: hand the message back; the
        # next claim decides (a live holder finishes it, a done task is not run again)
        logger.warning("task_id=%s: result refused (stale token); requeued", envelope.task_id)
        await quietly(message.nack(requeue=True))
        return None
    if commit.status != "ok":
        logger.info("task_id=%s: result not stored (%s)", envelope.task_id, commit.status)
        await quietly(message.ack())
        return None
    if dead is not None:
        reason, body, details = dead
        await publisher.dead_letter(reason, body, details=details, task_id=envelope.task_id)
    await runtime.deliver(envelope, result, commit.waiters)
    await quietly(message.ack())
    return result


async def _emit(
    runtime: WorkerRuntime, envelope: TaskEnvelope, state: str, data: dict[str, Any]
) -> None:
    await emit_states(
        runtime.publisher,
        (state,),
        task_id=envelope.task_id,
        trace_id=envelope.trace_id,
        agent_id=runtime.agent.agent_id,
        instance_id=runtime.instance_id,
        data=data,
    )


def check_output(output: object, max_bytes: int) -> Outcome:
    """A handler's return value as an outcome: completed, or failed ``bad_handler_output``
    naming what cannot travel (not a dict, a value that is not plain JSON, too large)."""
    if not isinstance(output, dict):
        return Outcome(
            "failed",
            code=BAD_OUTPUT,
            message=f"handler returned {type(output).__name__}, expected dict",
            details={"type": type(output).__name__},
        )
    problem = json_problem(output)
    if problem is not None:
        key, kind = problem
        return Outcome(
            "failed",
            code=BAD_OUTPUT,
            message=f"{key} is a {kind}, which JSON cannot encode; return plain dicts, "
            "lists, strings, numbers, booleans and None",
            details={"key": key, "type": kind},
        )
    try:
        size = len(dumps(output))
    except (TypeError, ValueError) as exc:
        return Outcome(
            "failed", code=BAD_OUTPUT, message=f"output does not encode: {exc}"[:1000]
        )
    if size > max_bytes:
        return Outcome(
            "failed",
            code=BAD_OUTPUT,
            message=f"output is {size} bytes encoded; the limit is {max_bytes} bytes "
            "(MESH_MAX_PAYLOAD_BYTES)",
            details={"bytes": size, "limit": max_bytes},
        )
    return Outcome("completed", output=output)


def nearest_delay(delays: tuple[int, ...], wanted: int) -> int:
    """The smallest declared delay queue at least `wanted` long (else the longest)."""
    for delay in delays:
        if delay >= wanted:
            return delay
    return delays[-1]


__all__ = ["BAD_OUTPUT", "TRANSIENT_ERRORS", "Outcome", "check_output", "nearest_delay", "settle"]
