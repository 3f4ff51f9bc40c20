"""The registry's wire protocol: AMQP ``type`` of each message and how it is built.

Messages to the registry (exchange/queue `Topology.registry`, key `registry_key`):

- ``register``: body `Registration`; answered ``register.ack`` (`RegistrationAck`) or
  ``register.error`` on ``reply_to``.
- ``register.a2a``: body an A2A Agent Card as published, the instance named in headers;
  answered as ``register``.
- ``heartbeat``: body `Heartbeat`; transient, expires after one interval; answered
  ``lease.lost`` on ``reply_to`` only when the lease is gone.
- ``heartbeats``: body `HeartbeatBatch`, the beats of one connection's instances that fell
  due together (`mesh.registry.beats`); each beat is taken, and answered, as a
  ``heartbeat`` whose ``reply_to`` it names.
- ``deregister``: body `Deregistration`; no answer.

Answers go to the session's own exclusive queue (`Topology.session_queue`), published
with ``mandatory=False`` (docs/design.md section 10).
"""

from __future__ import annotations

from typing import Any

import aio_pika
from aio_pika.abc import DeliveryMode

from mesh.schemas import Deregistration, Heartbeat, HeartbeatBatch, Registration, encode
from mesh.schemas.codec import dumps
from mesh.topology import AGENT_HEADER, CONCURRENCY_HEADER, INSTANCE_HEADER

JSON = "application/json"

REGISTER = "register"
REGISTER_A2A = "register.a2a"
HEARTBEAT = "heartbeat"
#: a `HeartbeatBatch`: the heartbeats of one connection's instances that fell due together
HEARTBEATS = "heartbeats"
DEREGISTER = "deregister"
ACK = "register.ack"
ERROR = "register.error"
LEASE_LOST = "lease.lost"


def register_message(
    registration: Registration, *, reply_to: str, correlation_id: str, expiration_s: float
) -> aio_pika.Message:
    """A registration RPC; it expires with the attempt so a retry never meets a stale copy."""
    return aio_pika.Message(
        encode(registration),
        content_type=JSON,
        type=REGISTER,
        reply_to=reply_to,
        correlation_id=correlation_id,
        expiration=expiration_s,
    )


def card_message(
    card: dict[str, Any],
    *,
    instance_id: str,
    reply_to: str,
    correlation_id: str,
    agent_id: str | None = None,
    max_concurrency: int | None = None,
    expiration_s: float = 5.0,
) -> aio_pika.Message:
    """Register an A2A Agent Card as it is; the instance is named in headers."""
    headers: dict[str, Any] = {INSTANCE_HEADER: instance_id}
    if agent_id is not None:
        headers[AGENT_HEADER] = agent_id
    if max_concurrency is not None:
        headers[CONCURRENCY_HEADER] = max_concurrency
    return aio_pika.Message(
        dumps(card),
        content_type=JSON,
        type=REGISTER_A2A,
        reply_to=reply_to,
        correlation_id=correlation_id,
        expiration=expiration_s,
        headers=headers,
    )


def heartbeat_message(beat: Heartbeat, *, reply_to: str, expiration_s: float) -> aio_pika.Message:
    """Transient; a heartbeat older than one interval is superseded, so it expires."""
    return aio_pika.Message(
        encode(beat),
        content_type=JSON,
        type=HEARTBEAT,
        reply_to=reply_to,
        expiration=expiration_s,
        delivery_mode=DeliveryMode.NOT_PERSISTENT,
    )


def heartbeats_message(batch: HeartbeatBatch, *, expiration_s: float) -> aio_pika.Message:
    """`heartbeat_message` of several instances: each beat names its own reply queue."""
    return aio_pika.Message(
        encode(batch),
        content_type=JSON,
        type=HEARTBEATS,
        expiration=expiration_s,
        delivery_mode=DeliveryMode.NOT_PERSISTENT,
    )


def deregister_message(goodbye: Deregistration) -> aio_pika.Message:
    return aio_pika.Message(encode(goodbye), content_type=JSON, type=DEREGISTER)


def lease_lost_body(instance_id: str, token: int) -> bytes:
    """Body of a ``lease.lost`` notice: the token whose lease is gone."""
    return dumps({"instance_id": instance_id, "token": token})
