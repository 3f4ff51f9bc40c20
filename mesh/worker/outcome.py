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

from mesh.messaging import envelope_message
from mesh.results import error_result
from mesh.topology import DELAY_HEADER
from schemas import Event, Result, TaskEnvelope
from schemas.codec import encode

if TYPE_CHECKING:
    from mesh.worker.runtime import WorkerRuntime

logger = logging.getLogger(__name__)

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
) -> Result | None:
    """Carry out `outcome`; returns the terminal Result sent to the caller, if any."""
    publisher = runtime.publisher
    topology = runtime.topology
    ids = {"agent_id": runtime.agent.agent_id, "instance_id": runtime.instance_id}
    if outcome.kind == "reject":
        logger.info("task_id=%s rejected: %s", envelope.task_id, outcome.message)
        await message.reject(requeue=False)
        return None
    if outcome.kind == "retry" and envelope.attempt < runtime.settings.max_retries:
        attempt = envelope.attempt + 1
        delay = outcome.delay_ms or topology.retry_delay_for(attempt)
        delay = _nearest_delay(topology.retry_delays_ms, delay)
        retried = envelope.model_copy(update={"attempt": attempt})
        exchange = await publisher.exchange(topology.retry)
        await exchange.publish(
            envelope_message(
                retried,
                headers={DELAY_HEADER: str(delay), "x-mesh-last-error": outcome.message[:1000]},
            ),
            routing_key=topology.agent_routing_key(runtime.agent.agent_id, envelope.priority),
            mandatory=False,
        )
        await message.ack()
        await publisher.emit(
            Event(
                type="task.retrying",
                task_id=envelope.task_id,
                trace_id=envelope.trace_id,
                **ids,
                data={"attempt": attempt, "delay_ms": delay, "error": outcome.message[:500]},
            )
        )
        logger.info(
            "task_id=%s retry %d in %d ms: %s", envelope.task_id, attempt, delay, outcome.message
        )
        return None
    if outcome.kind == "completed":
        result = Result(
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            status="completed",
            output=outcome.output or {},
            timings=timings,
            hops=envelope.hops,
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
        await publisher.dead_letter(
            "retries", encode(envelope), details=details, task_id=envelope.task_id
        )
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
            await publisher.dead_letter(
                "expired", message.body, details=outcome.details, task_id=envelope.task_id
            )
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
    await runtime.deliver(envelope, result)
    await message.ack()
    return result


def _nearest_delay(delays: tuple[int, ...], wanted: int) -> int:
    """The smallest declared delay queue at least `wanted` long (else the longest)."""
    for delay in delays:
        if delay >= wanted:
            return delay
    return delays[-1]


__all__ = ["TRANSIENT_ERRORS", "Outcome", "settle"]
