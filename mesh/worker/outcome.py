"""What a handler's run came to (`Outcome`) and the Result that says so; no I/O here.

Handlers report outcomes by returning (completed) or raising: `Retry` or a transient error
(`mesh.retrying.TRANSIENT_ERRORS`: retried through `mesh.retry.<delay>`, at most
`max_retries` times, then `mesh.dead.retries`), `Reject` (dead-lettered back to the router,
which tries the next candidate), a deadline (`expired`), anything else (`failed`).
`mesh.worker.settle.Settler` carries outcomes out on the wire; `mesh.testing` maps them the
same way in memory.

The caller sees an exception as its type and its message through `mesh.redact.redact`
(no URL, no password, no token): a database driver's error quoting its DSN stays in this
process's log (with the traceback), never in a Result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Literal

from mesh.errors import EffectUnknown, Fail, Reject, Retry
from mesh.redact import redact
from mesh.results import error_result
from mesh.retrying import TRANSIENT_ERRORS
from mesh.schemas import Result, TaskEnvelope
from mesh.schemas.codec import dumps, json_problem

logger = logging.getLogger(__name__)

#: error code of a handler output that cannot be sent (not a dict, not JSON, too large)
BAD_OUTPUT = "bad_handler_output"

Kind = Literal["completed", "failed", "retry", "reject", "expired"]


@dataclass(slots=True)
class Outcome:
    kind: Kind
    output: dict[str, Any] | None = None
    code: str = ""
    message: str = ""
    delay_ms: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


def outcome_of_error(exc: Exception, task_id: str = "", *, expose: bool = False) -> Outcome:
    """The outcome of an exception a handler (or a middleware hook) raised; with `expose`
    (`Agent.expose_errors`) a handler's own exception text reaches the caller unredacted."""
    if isinstance(exc, Retry):
        return Outcome("retry", message=exc.reason, delay_ms=exc.delay_ms)
    if isinstance(exc, Reject):
        return Outcome("reject", message=exc.reason)
    if isinstance(exc, Fail):
        return Outcome("failed", code=exc.code, message=exc.message, details=exc.details)
    if isinstance(exc, TRANSIENT_ERRORS):
        return Outcome("retry", message=error_text(exc))
    if isinstance(exc, EffectUnknown):
        logger.error("task_id=%s: %s", task_id, exc)
        return Outcome(
            "failed", code=EffectUnknown.code, message=str(exc), details={"effect": exc.name}
        )
    logger.warning("handler failed task_id=%s", task_id, exc_info=exc)
    text = f"{type(exc).__name__}: {exc}" if expose else error_text(exc)
    return Outcome("failed", code="handler_error", message=text)


def error_text(exc: BaseException) -> str:
    """What a caller may read of `exc`: its type and its message without secrets."""
    return f"{type(exc).__name__}: {redact(str(exc))}"


def terminal_result(
    envelope: TaskEnvelope, outcome: Outcome, timings: dict[str, float], **ids: Any
) -> Result:
    """The Result a terminal outcome answers with (a ``retry`` here: retries exhausted)."""
    if outcome.kind == "completed":
        return Result(
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            status="completed",
            output=outcome.output or {},
            timings=timings,
            hops=envelope.hops,
            route=envelope.route,
            **ids,
        )
    if outcome.kind == "retry":
        details = {"attempts": envelope.attempt + 1, "last_error": outcome.message}
        return error_result(
            envelope,
            "failed",
            "retries_exhausted",
            f"failed after {envelope.attempt + 1} attempts: {outcome.message}",
            details,
            timings=timings,
            **ids,
        )
    if outcome.kind == "expired":
        return error_result(
            envelope,
            "expired",
            outcome.code or "deadline_passed",
            outcome.message,
            outcome.details,
            timings=timings,
            **ids,
        )
    if outcome.kind == "reject":
        return error_result(
            envelope,
            "rejected",
            "rejected",
            outcome.message,
            outcome.details,
            timings=timings,
            **ids,
        )
    return error_result(
        envelope,
        "failed",
        outcome.code or "handler_error",
        outcome.message,
        outcome.details,
        timings=timings,
        **ids,
    )


def unstorable_result(
    envelope: TaskEnvelope, exc: Exception, timings: dict[str, float], **ids: Any
) -> Result:
    """The failed Result of an output the codec or the store refused."""
    return error_result(
        envelope,
        "failed",
        BAD_OUTPUT,
        f"the handler's output could not be stored: {error_text(exc)}"[:2000],
        None,
        timings=timings,
        **ids,
    )


def check_output(output: object, max_bytes: int) -> Outcome:
    """A handler's return value as an outcome: completed, or failed ``bad_handler_output``
    naming what cannot travel (not a dict, a value that is not plain JSON, too large)."""
    if not isinstance(output, dict):
        kind = type(output).__name__
        return _bad_output(f"handler returned {kind}, expected dict", type=kind)
    problem = json_problem(output)
    if problem is not None:
        key, kind = problem
        return _bad_output(
            f"{key} is a {kind}, which JSON cannot encode; return plain dicts, "
            "lists, strings, numbers, booleans and None",
            key=key,
            type=kind,
        )
    try:
        size = len(dumps(output))
    except (TypeError, ValueError) as exc:
        return _bad_output(f"output does not encode: {exc}"[:1000])
    if size > max_bytes:
        return _bad_output(
            f"output is {size} bytes encoded; the limit is {max_bytes} bytes "
            "(MESH_MAX_PAYLOAD_BYTES)",
            bytes=size,
            limit=max_bytes,
        )
    return Outcome("completed", output=output)


def _bad_output(message: str, **details: Any) -> Outcome:
    return Outcome("failed", code=BAD_OUTPUT, message=message, details=details)


def nearest_delay(delays: tuple[int, ...], wanted: int) -> int:
    """The smallest declared delay queue at least `wanted` long (else the longest)."""
    for delay in delays:
        if delay >= wanted:
            return delay
    return delays[-1]


__all__ = [
    "BAD_OUTPUT",
    "TRANSIENT_ERRORS",
    "Outcome",
    "check_output",
    "error_text",
    "nearest_delay",
    "outcome_of_error",
    "terminal_result",
    "unstorable_result",
]
