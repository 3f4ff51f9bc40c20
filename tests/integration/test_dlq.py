"""Dead letters can be listed without losing them, and replayed as new tasks."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.dispatch.dead_letters import peek, replay
from mesh.dispatch.store import TaskStore
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import drain_queue, start_router, start_worker

pytestmark = pytest.mark.integration


async def test_list_leaves_dead_letters_and_replay_runs_them_as_new_tasks(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    async with MeshClient(conn) as client:
        dead = await client.request("do", {"n": 7}, target="effect", wait_s=20)
        assert dead.status == "unroutable"  # nobody serves "effect" yet

        for _ in range(2):  # looking twice: still there, in order
            letters = await peek(conn, "unroutable")
            assert [d.task_id for d in letters] == [dead.task_id]
        assert letters[0].details["code"] == "no_agent"
        assert letters[0].as_dict()["body"]["payload"] == {"n": 7}

        await start_worker(conn, add_cleanup, effect_agent())
        [(old, new)] = await replay(conn, "unroutable")
        assert old == dead.task_id and new != old
        assert await peek(conn, "unroutable") == []

    # the replayed task ran under its new id, on the same trace
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    await wait_until(lambda: _state(store, new), timeout=10)
    state = await store.state(new)
    assert state["trace_id"] == dead.trace_id


async def _state(store: Any, task_id: str) -> bool:
    return (await store.state(task_id)).get("state") == "completed"


async def test_invalid_bodies_are_never_replayed(conn: MeshConnection) -> None:
    channel = await conn.channel()
    await conn.topology.declare(channel)
    with pytest.raises(ValueError, match="cannot be replayed"):
        await replay(conn, "invalid")
    assert await drain_queue(conn, conn.topology.dead_queue("invalid")) == []
