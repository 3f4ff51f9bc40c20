"""Trace ids and sampling, shared by `mesh.tracing` and `mesh.tracing.spans` (no OTel)."""

from __future__ import annotations

import hashlib
import re

#: tasks of this priority and above are always traced
ALWAYS_TRACED_PRIORITY = 5
#: an envelope trace_id that is an OTel trace id already (what `schemas.new_id` makes)
_OTEL_HEX = re.compile(r"[0-9a-f]{32}")


def otel_trace_id(trace_id: str) -> int:
    """The OTel trace id of an envelope's `trace_id`: the trace_id itself when it is 32
    lowercase hex digits (and not all zeros), else the first 128 bits of its SHA-256."""
    if _OTEL_HEX.fullmatch(trace_id):
        value = int(trace_id, 16)
        if value:
            return value
    digest = hashlib.sha256(trace_id.encode()).digest()
    return int.from_bytes(digest[:16], "big") or 1


def is_traced(trace_id: int, priority: int, ratio: float) -> bool:
    """Whether the trace of a task is recorded: always at priority >= 5, else when the
    first 64 bits of the SHA-256 of its OTel `trace_id` fall in the first `ratio` of
    their range (hashed: a uuid4's low 64 bits start with fixed variant bits, and a
    caller's ids may count up)."""
    if priority >= ALWAYS_TRACED_PRIORITY:
        return True
    digest = hashlib.sha256(trace_id.to_bytes(16, "big")).digest()
    return int.from_bytes(digest[:8], "big") < int(ratio * (1 << 64))


def traceparent(trace_id: str, span_id: int, *, sampled: bool) -> str:
    """A W3C ``traceparent`` continuing the trace of an envelope's `trace_id` from the hop
    `span_id` (64 bits, not 0): ``00-<otel trace id>-<span id>-<01 sampled | 00>``."""
    return f"00-{otel_trace_id(trace_id):032x}-{span_id or 1:016x}-{'01' if sampled else '00'}"


__all__ = ["ALWAYS_TRACED_PRIORITY", "is_traced", "otel_trace_id", "traceparent"]
