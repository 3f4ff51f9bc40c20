"""Explicit feedback on a routed task (`mesh feedback TASK_ID good|bad`, `MeshClient.feedback`).

After a dispatch the router records which agent took a task and the task's text (24 h;
written in batches by `mesh.router.outcomes`). Feedback
looks that up: `good` adds the text to the agent's example memory, `bad` counts against the
agent and takes the text out of its memory (a completed task was learned automatically);
then a `route.feedback` event tells every router to reload that agent's memory.
"""

from __future__ import annotations

import asyncio
from typing import cast

from mesh.connection import MeshConnection
from mesh.errors import UnknownTask
from mesh.messaging import Publisher
from mesh.router.memory import COUNTED_BEFORE, ExampleMemory
from schemas import Event

#: how long a routed task can still receive feedback
ROUTE_RECORD_TTL_S = 86_400


#: routers write routing records in batches (`mesh.router.outcomes`), every 50 ms: feedback
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
