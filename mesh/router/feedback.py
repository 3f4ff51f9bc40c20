"""Explicit feedback on a routed task (`mesh feedback TASK_ID good|bad`, `MeshClient.feedback`).

After a dispatch the router records which agent took a task and the task's text (24 h;
written in batches by `mesh.router.outcomes`). Feedback
looks that up: `good` adds the text to the agent's example memory, `bad` counts against the
agent and takes the text out of its memory (a completed task was learned automatically);
then a `route.feedback` event tells every router to reload that agent's memory.

Under access control (``MESH_ACCESS_CONTROL=true``) a caller has no Redis access: it
publishes a `Feedback` message to ``<ns>.feedback`` instead (`send_feedback`), and a router
applies it (`mesh.router.feedback_consumer`) only when the broker-validated sender is the
task's owner, the client user that submitted it.
"""

from __future__ import annotations

import asyncio
from typing import cast

import aio_pika
import aiormq.exceptions
from aio_pika.abc import DeliveryMode

from mesh.connection import MeshConnection
from mesh.errors import ConfigError, UnknownTask
from mesh.messaging import JSON, Publisher
from mesh.retrying import PUBLISH_RETRY_S, with_retries
from mesh.router.memory import COUNTED_BEFORE, ExampleMemory
from mesh.schemas import Event, Feedback, encode

#: how long a routed task can still receive feedback
ROUTE_RECORD_TTL_S = 86_400


#: routers write routing records in batches (`mesh.router.keeper.FLUSH_INTERVAL_S`): feedback
#: given right after the Result may arrive first, so a missing record is looked up again
RECORD_WAIT_S = 2.0


async def _route_record(conn: MeshConnection, task_id: str) -> dict[bytes, bytes]:
    key = conn.keys.outcome(task_id)
    loop = asyncio.get_running_loop()
    end = loop.time() + RECORD_WAIT_S
    while True:
        raw = cast(dict[bytes, bytes], await conn.redis.hgetall(key))
        if raw or loop.time() >= end:
            return raw
        await asyncio.sleep(0.05)


async def give_feedback(
    conn: MeshConnection, publisher: Publisher, task_id: str, good: bool
) -> tuple[str, bool]:
    """Record feedback on `task_id`; returns (agent_id, counted) -- False if given before.

    Raises:
        UnknownTask: the task has no routing record (looked up for `RECORD_WAIT_S`).
    """
    raw = await _route_record(conn, task_id)
    if not raw:
        raise UnknownTask(
            f"no routing record for task_id={task_id!r}: it was not routed semantically "
            "or is older than 24 h"
        )
    agent_id = raw[b"agent_id"].decode()
    text = raw[b"text"].decode()
    memory = ExampleMemory(conn.redis, conn.keys, conn.settings.example_memory_size)
    answer = await memory.record(
        agent_id,
        task_id,
        "good" if good else "bad",
        learn_text=text if good else None,
        unlearn_text=None if good else text,
    )
    counted = answer != COUNTED_BEFORE
    await publisher.emit(
        Event(
            type="route.feedback",
            task_id=task_id,
            agent_id=agent_id,
            data={"good": good, "counted": counted},
        )
    )
    return agent_id, counted


def feedback_message(feedback: Feedback) -> aio_pika.Message:
    """A persistent message for `feedback` (the publisher stamps its ``user_id``)."""
    return aio_pika.Message(
        encode(feedback),
        content_type=JSON,
        delivery_mode=DeliveryMode.PERSISTENT,
        message_id=f"feedback:{feedback.task_id}",
        correlation_id=feedback.task_id,
    )


async def send_feedback(
    publisher: Publisher, task_id: str, good: bool, *, retry_s: float = PUBLISH_RETRY_S
) -> None:
    """Publish feedback on `task_id` to ``<ns>.feedback`` and wait for the broker's confirm
    (mandatory: no bound queue raises `PublishError`); retried through a broker outage. A
    copy sent twice counts once (the memory counts each (task, verdict) once).

    Raises:
        pydantic.ValidationError: `task_id` is no identifier.
        ConfigError: the broker refused this user the feedback exchange (not retried).
    """
    topology = publisher.topology
    message = Feedback(task_id=task_id, good=good)

    async def publish() -> None:
        exchange = await publisher.exchange(topology.feedback)
        try:
            await publisher.send(
                exchange, feedback_message(message), topology.feedback_key, mandatory=True
            )
        except aiormq.exceptions.ChannelAccessRefused as exc:
            # a closed channel counts as an outage elsewhere; a refusal will not pass
            raise ConfigError(
                f"the broker refused user {publisher.login!r} feedback on "
                f"{topology.feedback!r} ({exc}): its permissions lack that exchange "
                "(re-run `mesh access provision`)"
            ) from None

    await with_retries(publish, retry_s)
