"""One Result from the Results of a compound request's parts. Pure: no I/O.

The parts are in the request's order, each with its agent, its words, its child task_id,
its status and output (and its error, when it did not complete). Every part completed:
``completed`` with ``output = {"parts": [...]}``. Any part did not: ``failed`` with code
``partial_failure``, a message naming the parts that did not complete and why, and the
same output with ``"partial": true``, so what did complete is not lost.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from mesh.schemas import ErrorInfo, Result, TaskEnvelope

__all__ = ["PARTIAL_FAILURE", "merge_results"]

#: the error code of a compound request some of whose parts did not complete
PARTIAL_FAILURE = "partial_failure"


def merge_results(
    parent: TaskEnvelope, parts: Sequence[dict[str, Any]], results: Sequence[Result]
) -> Result:
    """The parent's Result; `parts` are the stored ``{agent_id, text, task_id}`` of each."""
    merged: list[dict[str, Any]] = []
    failed: list[str] = []
    for number, (part, result) in enumerate(zip(parts, results, strict=True), start=1):
        entry: dict[str, Any] = {
            "agent_id": part["agent_id"],
            "text": part["text"],
            "task_id": part["task_id"],
            "status": result.status,
            "output": result.output,
        }
        if result.error is not None:
            entry["error"] = {"code": result.error.code, "message": result.error.message}
        if result.status != "completed":
            why = result.error.code if result.error is not None else result.status
            failed.append(f"part {number} ({part['agent_id']}): {result.status}, {why}")
        merged.append(entry)
    timings = {"parts": float(len(merged))}
    hops = max((r.hops for r in results), default=parent.hops)
    if not failed:
        return Result(
            task_id=parent.task_id,
            trace_id=parent.trace_id,
            status="completed",
            output={"parts": merged},
            timings=timings,
            hops=hops,
        )
    message = f"{len(failed)} of {len(merged)} parts did not complete: " + "; ".join(failed)
    return Result(
        task_id=parent.task_id,
        trace_id=parent.trace_id,
        status="failed",
        output={"parts": merged, "partial": True},
        error=ErrorInfo(
            code=PARTIAL_FAILURE,
            message=message[:8_000],
            details={
                "failed": [i for i, r in enumerate(results) if r.status != "completed"],
                "completed": [i for i, r in enumerate(results) if r.status == "completed"],
            },
        ),
        timings=timings,
        hops=hops,
    )
