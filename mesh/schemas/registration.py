"""Registry messages: register, the registry's answer, heartbeats and deregistration."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from mesh.schemas._base import WireModel
from mesh.schemas.envelope import Identifier, TagMap


class Registration(WireModel):
    """An agent instance asking to join the mesh (docs/design.md section 5)."""

    agent_id: Identifier = Field(description="the logical agent; instances share its queue")
    instance_id: Identifier = Field(description="this process")
    name: Annotated[str, Field(max_length=256)] = ""
    version: Annotated[str, Field(max_length=64)] = "0"
    capability_text: str = Field(min_length=1, max_length=4_000)
    supported_tasks: list[Annotated[str, Field(max_length=256)]] = Field(
        default_factory=list, max_length=256
    )
    tags: TagMap = Field(default_factory=dict)
    keywords: list[Annotated[str, Field(min_length=1, max_length=128)]] = Field(
        default_factory=list, max_length=256
    )
    examples: list[Annotated[str, Field(min_length=1, max_length=4_000)]] = Field(
        default_factory=list, max_length=256
    )
    max_concurrency: int = Field(default=4, ge=1, le=10_000)
    priority_bonus: float = Field(default=0.0, ge=-1.0, le=1.0)
    bids: bool = Field(
        default=True,
        description="answers calls for bids; the router calls only agents that do (a call "
        "to none would wait the whole bid window for nothing)",
    )
    input_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema every task payload of this agent fits: its worker refuses "
        "one that does not (bad_payload) and a router refuses a targeted task or handoff",
    )
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="JSON Schema every output of this agent fits (else bad_handler_output)",
    )


class RegistrationAck(WireModel):
    """The registry's answer: the fencing token and the lease terms."""

    agent_id: Identifier
    instance_id: Identifier
    token: int = Field(ge=1, description="strictly greater than every earlier token of agent_id")
    lease_ttl_s: float = Field(gt=0)
    heartbeat_s: float = Field(gt=0)


class Heartbeat(WireModel):
    """A lease renewal with the instance's current load. Transient, never confirmed."""

    agent_id: Identifier
    instance_id: Identifier
    token: int = Field(ge=1)
    in_flight: int = Field(default=0, ge=0)
    max_concurrency: int = Field(default=1, ge=1, le=10_000)
    stuck: int = Field(
        default=0, ge=0, description="tasks in flight whose handler ended long ago, unsettled"
    )
    sent_ms: int = Field(ge=0)


#: heartbeats one `HeartbeatBatch` carries at most (a registry renews as many in one call)
MAX_BATCH_BEATS = 500


class BatchedBeat(Heartbeat):
    """One heartbeat of a `HeartbeatBatch`, with the reply queue a single one names in its
    AMQP ``reply_to`` (where a lost lease is answered without access control)."""

    reply_to: Annotated[str, Field(max_length=255)] = ""


class HeartbeatBatch(WireModel):
    """The heartbeats of the instances on one connection that fell due together, sent as
    one message (AMQP ``type`` ``heartbeats``): a registry takes each as a single one."""

    beats: list[BatchedBeat] = Field(min_length=1, max_length=MAX_BATCH_BEATS)


class Deregistration(WireModel):
    """A graceful goodbye: the instance is down at once."""

    agent_id: Identifier
    instance_id: Identifier
    token: int = Field(ge=1)
