"""Wire contracts of the Agent-Reach mesh: frozen pydantic v2 models and their one codec."""

from pydantic import BaseModel

from mesh.schemas._base import SCHEMA_VERSION, new_id, now_ms
from mesh.schemas.bid import Bid, BidRequest
from mesh.schemas.codec import InvalidEnvelope, decode, encode
from mesh.schemas.envelope import DEFAULT_MAX_PAYLOAD_BYTES, TaskEnvelope
from mesh.schemas.event import Event, EventBatch, batch_body
from mesh.schemas.feedback import Feedback
from mesh.schemas.registration import (
    MAX_BATCH_BEATS,
    BatchedBeat,
    Deregistration,
    Heartbeat,
    HeartbeatBatch,
    Registration,
    RegistrationAck,
)
from mesh.schemas.result import TERMINAL_STATUSES, ErrorInfo, FieldProblem, Result, RouteInfo

#: every model exported to `schemas/json/`, by file stem
WIRE_MODELS: dict[str, type[BaseModel]] = {
    "task_envelope": TaskEnvelope,
    "result": Result,
    "registration": Registration,
    "registration_ack": RegistrationAck,
    "heartbeat": Heartbeat,
    "heartbeat_batch": HeartbeatBatch,
    "deregistration": Deregistration,
    "bid_request": BidRequest,
    "bid": Bid,
    "event": Event,
    "event_batch": EventBatch,
    "feedback": Feedback,
}

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES",
    "MAX_BATCH_BEATS",
    "SCHEMA_VERSION",
    "TERMINAL_STATUSES",
    "WIRE_MODELS",
    "BatchedBeat",
    "Bid",
    "BidRequest",
    "Deregistration",
    "ErrorInfo",
    "Event",
    "EventBatch",
    "Feedback",
    "FieldProblem",
    "Heartbeat",
    "HeartbeatBatch",
    "InvalidEnvelope",
    "Registration",
    "RegistrationAck",
    "Result",
    "RouteInfo",
    "TaskEnvelope",
    "batch_body",
    "decode",
    "encode",
    "new_id",
    "now_ms",
]
