"""The example memory in Redis: bounded, once per outcome, vetoed and unlearned by bad feedback."""

from __future__ import annotations

import pytest

from mesh.connection import MeshConnection
from mesh.router.memory import COUNTED_BEFORE, ExampleMemory

pytestmark = pytest.mark.integration


async def test_reservoir_stays_bounded_and_counts_every_outcome_once(conn: MeshConnection) -> None:
    memory = ExampleMemory(conn.redis, conn.keys, size=5)
    for i in range(40):
        assert await memory.record("a", f"t{i}", "completed", learn_text=f"text {i}") != (
            COUNTED_BEFORE
        )
        assert (
            await memory.record("a", f"t{i}", "completed", learn_text=f"text {i}") == COUNTED_BEFORE
        )
    loaded = await memory.load("a")
    assert len(loaded.texts) == 5 and len(set(loaded.texts)) == 5
    assert loaded.seen == 40 and loaded.completed == 40


async def test_bad_feedback_vetoes_a_later_completion_and_unlearns_an_earlier_one(
    conn: MeshConnection,
) -> None:
    memory = ExampleMemory(conn.redis, conn.keys)
    # feedback overtook the completion event: the completion must not teach the text
    await memory.record("a", "t1", "bad", unlearn_text="wrong for a")
    await memory.record("a", "t1", "completed", learn_text="wrong for a")
    # completion first, feedback second: the text is taken back out
    await memory.record("a", "t2", "completed", learn_text="also wrong")
    assert (await memory.load("a")).texts == ("also wrong",)
    await memory.record("a", "t2", "bad", unlearn_text="also wrong")
    loaded = await memory.load("a")
    assert loaded.texts == ()
    assert (loaded.completed, loaded.bad) == (2, 2)
    # a freed slot is reused before any sampling
    await memory.record("a", "t3", "good", learn_text="right for a")
    assert (await memory.load("a")).texts == ("right for a",)
