"""`Delivery`: one message of the router queue, as the broker delivered it (the steps' input)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message of the router queue, as the broker delivered it.

    `user_id` is the broker-validated sender: under access control it decides (the
    guard), never a body field. `reply_to` and `correlation_id` are the AMQP properties
    (standard RPC): the Result goes to `reply_to` when the body names no queue, and
    carries the caller's `correlation_id`; fields of the body win.
    """

    body: bytes
    headers: dict[str, Any] = field(default_factory=dict)
    routing_key: str = ""
    redelivered: bool = False
    #: `time.perf_counter()` when it arrived (routing time is measured from here)
    received: float = 0.0
    reply_to: str | None = None
    correlation_id: str | None = None
    user_id: str | None = None
    #: the AMQP priority it was published with (what ordered it in the router queue)
    priority: int = 0


__all__ = ["Delivery"]
