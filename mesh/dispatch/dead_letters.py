"""Dead letters: look at them, replay them, purge them (`mesh dlq list|replay|purge`).

Listing takes messages without acknowledging them and closes the channel, so RabbitMQ puts
them back: nothing is lost by looking. Replaying republishes a dead envelope to the ingress
as a *new* task (a fresh task_id: the old one is finished, and its idempotency record would
answer it with the old Result), with the same trace, its deadline reset, and `source`
naming the dead task; the dead letter is acknowledged only after the publish is confirmed.
Bodies that are not valid envelopes (`mesh.dead.invalid`) are never replayed. A replay
may name another agent (``target``): the new task goes straight to it. Purging deletes
every letter of one queue (the queue stays).

The queues are bounded (`Topology`: ``MESH_DEAD_LETTER_MAX_LENGTH`` letters, refused past
it and reported by the sender, and ``MESH_DEAD_LETTER_TTL_S``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mesh.connection import MeshConnection
from mesh.messaging import Publisher
from mesh.schemas import InvalidEnvelope, TaskEnvelope, decode, new_id
from mesh.schemas.codec import loads
from mesh.topology import DETAILS_HEADER, REASON_HEADER, DeadReason


@dataclass(frozen=True, slots=True)
class DeadLetter:
    reason: str
    task_id: str | None
    body: bytes
    details: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        try:
            body: Any = loads(self.body)
        except ValueError:
            body = self.body[:2_000].decode(errors="replace")
        return {
            "reason": self.reason,
            "task_id": self.task_id,
            "details": self.details,
            "body": body,
        }


async def peek(conn: MeshConnection, reason: DeadReason, limit: int = 20) -> list[DeadLetter]:
    """Up to `limit` dead letters of `reason`, oldest first, left in their queue."""
    channel = await conn.channel(confirms=False)
    try:
        queue = await channel.get_queue(conn.topology.dead_queue(reason), ensure=False)
        found: list[DeadLetter] = []
        while len(found) < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            headers = message.headers or {}
            raw_details = headers.get(DETAILS_HEADER)
            try:
                details = loads(raw_details) if isinstance(raw_details, str | bytes) else {}
            except ValueError:
                details = {"raw": str(raw_details)[:500]}
            found.append(
                DeadLetter(
                    str(headers.get(REASON_HEADER, reason)),
                    message.message_id,
                    message.body,
                    details if isinstance(details, dict) else {},
                )
            )
        return found
    finally:
        await channel.close()  # unacknowledged: back in the queue


def replayed(envelope: TaskEnvelope, target: str | None = None) -> TaskEnvelope:
    """The new task a dead envelope becomes when it is replayed (for `target`, when given:
    that agent, without semantic routing)."""
    retarget: dict[str, Any] = {} if target is None else {"target": target}
    return envelope.model_copy(
        update={
            **retarget,
            "task_id": new_id(),
            "source": f"dlq-replay:{envelope.task_id}",
            "deadline_ms": None,
            "created_ms": None,
            "attempt": 0,
            "reroutes": 0,
            "excluded_agents": [],
            "route": None,
        }
    )


@dataclass(frozen=True, slots=True)
class Replayed:
    """What `replay` did: (old, new) task ids replayed, and the letters that were not
    envelopes (moved to ``dead.invalid``, not replayed)."""

    done: list[tuple[str, str]]
    skipped: int = 0


async def replay(
    conn: MeshConnection, reason: DeadReason, limit: int = 1, *, target: str | None = None
) -> Replayed:
    """Replay up to `limit` dead letters of `reason` as new tasks (for agent `target`,
    when given, instead of the tasks' own target or semantic routing).

    A letter that is not an envelope is skipped and counted (moved to ``dead.invalid``,
    which keeps it bounded), and the replay goes on with the next one.
    """
    if reason == "invalid":
        raise ValueError("invalid bodies cannot be replayed: fix and resubmit them")
    publisher = Publisher(conn)
    await publisher.start()
    channel = await conn.channel(confirms=False)
    done: list[tuple[str, str]] = []
    skipped = 0
    try:
        queue = await channel.get_queue(conn.topology.dead_queue(reason), ensure=False)
        while len(done) + skipped < limit:
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                break
            try:
                envelope = decode(
                    TaskEnvelope, message.body, max_payload_bytes=conn.settings.max_payload_bytes
                )
            except InvalidEnvelope as exc:
                details = {**exc.as_details(), "replayed_from": reason}
                await publisher.dead_letter("invalid", message.body, details=details)
                await message.ack()
                skipped += 1
                continue
            fresh = replayed(envelope, target)
            await publisher.publish_envelope(
                conn.topology.ingress,
                conn.topology.ingress_band_key(fresh.priority),
                fresh,
                mandatory=True,
            )
            await message.ack()
            done.append((envelope.task_id, fresh.task_id))
    finally:
        await channel.close()
        await publisher.close()
    return Replayed(done, skipped)


async def purge(conn: MeshConnection, reason: DeadReason) -> int:
    """Delete every dead letter of `reason`; how many there were (the queue stays)."""
    channel = await conn.channel(confirms=False)
    try:
        queue = await channel.get_queue(conn.topology.dead_queue(reason), ensure=False)
        result = await queue.purge()
        return int(result.message_count or 0)
    finally:
        await channel.close()
