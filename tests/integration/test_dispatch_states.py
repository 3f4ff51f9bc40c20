"""The Lua transition script agrees with the state table on random event sequences."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from mesh.config import Settings
from mesh.connection import connect
from mesh.dispatch.states import NEW, STATES, walk
from mesh.dispatch.store import TaskStore
from mesh.schemas import new_id

pytestmark = pytest.mark.integration


async def _replay(settings: Settings, steps: list[list[str]]) -> None:
    conn = await connect(settings, name="state-property")
    try:
        store = TaskStore(conn.redis, conn.keys, settings)
        task_id = new_id()
        expected = NEW
        applied_all: list[str] = []
        for path in steps:
            after = walk(expected, path)
            applied = await store.advance(task_id, *path, by="test")
            if after is None:
                assert applied is None, (expected, path)
            else:
                assert applied is not None, (expected, path)
                applied_all += applied
                expected = after
            state = (await store.state(task_id)).get("state", NEW)
            assert state == expected
        assert [h["state"] for h in await store.history(task_id)] == applied_all
        await conn.redis.delete(conn.keys.task(task_id), conn.keys.task_history(task_id))
    finally:
        await conn.close()


def test_lua_transitions_match_the_table(settings: Settings) -> None:
    @hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(st.lists(st.sampled_from(STATES), min_size=1, max_size=3), max_size=12))
    def check(steps: list[list[str]]) -> None:
        asyncio.run(_replay(settings, steps))

    check()
