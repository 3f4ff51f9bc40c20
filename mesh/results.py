"""Building the Results the mesh itself answers with (errors, expiries, dead ends)."""

from __future__ import annotations

from typing import Any

from mesh.schemas import ErrorInfo, Result, TaskEnvelope
from mesh.schemas.result import Status


def error_result(
    envelope: TaskEnvelope,
    status: Status,
    code: str,
    message: str,
    details: dict[str, Any] | None = None,
    **extra: Any,
) -> Result:
    """A terminal non-completed Result for `envelope`."""
    return Result(
        task_id=envelope.task_id,
        trace_id=envelope.trace_id,
        status=status,
        error=ErrorInfo(code=code, message=message, details=details or {}),
        hops=envelope.hops,
        **{"route": envelope.route, **extra},
    )
