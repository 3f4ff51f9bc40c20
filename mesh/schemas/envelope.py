"""The task envelope: what a client asks the mesh to do."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from pydantic import Field, ValidationInfo, field_validator

from mesh.schemas._base import SCHEMA_VERSION, WireModel, new_id
from mesh.schemas.result import RouteInfo

#: default cap on the encoded payload; `Settings.max_payload_bytes` overrides it per call
DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20

Identifier = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:@-]+$")]
TagMap = dict[
    Annotated[str, Field(min_length=1, max_length=64)], Annotated[str, Field(max_length=256)]
]


class TaskEnvelope(WireModel):
    """One task on its way through the mesh (docs/design.md section 4)."""

    task_id: Identifier = Field(default_factory=new_id, description="unique; the idempotency key")
    trace_id: Identifier = Field(default_factory=new_id, description="shared by the whole chain")
    parent_task_id: Identifier | None = None
    capability: str = Field(
        min_length=1, max_length=4_000, description="natural-language need, used for routing"
    )
    payload: dict[str, Any] = Field(default_factory=dict)
    # ``ctx:<trace_id>:<version>``, under access control ``/<agent_id>`` after it: two ids
    context_ref: Annotated[str, Field(max_length=320)] | None = Field(
        default=None, description="reference into the context store, never the context itself"
    )
    priority: int = Field(default=5, ge=1, le=10)
    timeout_ms: int = Field(default=30_000, ge=100, le=3_600_000)
    deadline_ms: int | None = Field(
        default=None, ge=0, description="absolute epoch ms; set at ingress when absent"
    )
    reply_to: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        default=None,
        description="queue for the Result; the ingress message's AMQP reply_to when absent",
    )
    correlation_id: Annotated[str, Field(min_length=1, max_length=255)] | None = Field(
        default=None,
        description="echoed as the Result message's AMQP correlation_id; the ingress "
        "message's correlation_id when absent (default: the task_id)",
    )
    max_hops: int = Field(default=5, ge=0, le=20)
    hops: int = Field(default=0, ge=0, le=1_000)
    required_tags: TagMap = Field(default_factory=dict, description="rule filter on agent tags")
    target: Identifier | None = Field(default=None, description="agent_id: skip semantic routing")
    source: Annotated[str, Field(max_length=256)] | None = None
    tags: TagMap = Field(default_factory=dict)
    schema_version: int = Field(default=SCHEMA_VERSION, ge=1, le=SCHEMA_VERSION)
    # --- bookkeeping the mesh maintains -------------------------------------------------
    created_ms: int | None = Field(default=None, ge=0, description="set at ingress")
    attempt: int = Field(default=0, ge=0, le=100, description="retries so far")
    reroutes: int = Field(default=0, ge=0, le=100, description="reroutes so far")
    excluded_agents: list[Identifier] = Field(
        default_factory=list, max_length=100, description="agents that timed out or rejected"
    )
    trajectory: list[Identifier] = Field(
        default_factory=list, max_length=1_000, description="agent_ids the trace visited"
    )
    route: RouteInfo | None = Field(
        default=None, description="how the router chose the agent; copied into the Result"
    )

    @field_validator("payload")
    @classmethod
    def _payload_size(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        limit = DEFAULT_MAX_PAYLOAD_BYTES
        if isinstance(info.context, dict):
            limit = int(info.context.get("max_payload_bytes", limit))
        try:
            size = len(orjson.dumps(value))
        except TypeError as exc:
            raise ValueError(f"payload is not JSON-serialisable: {exc}") from None
        if size > limit:
            raise ValueError(f"payload is {size} bytes encoded; the limit is {limit} bytes")
        return value
