"""The frozen worker (seed 002 sections 4.2 and 7.4, "orphan tasks").

A handler hangs while its process stays connected and heartbeating. After the agent's
processing timeout without progress its instance cancels it and hands the task back to the
agent's queue, where another instance completes it: the caller gets exactly one Result,
the side effect happens once, and an instance whose handler took the cancellation keeps
serving. A handler that calls `ctx.progress()` on long work is left alone.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.connection import MeshConnection
from mesh.schemas import TaskEnvelope
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration

#: the agent's processing timeout in these stories
TIMEOUT_S = 1.0


def frozen_once_agent(ignores_cancel: bool) -> tuple[Agent, list[str], asyncio.Event]:
    """Refunds once; its first run hangs after the refund (ignoring its cancellation when
    `ignores_cancel`), every later run completes."""
    agent = Agent("refunds", "Refunds orders", max_concurrency=4, processing_timeout_s=TIMEOUT_S)
    runs: list[str] = []
    first_run = asyncio.Event()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        runs.append(ctx.instance_id)
        first_run.set()
        applied = await ctx.apply_once(f"refund:{task.task_id}")
        if len(runs) == 1:
            # frozen: waits for a downstream that never answers; one that ignores its
            # cancellation swallows the first (the test's loop cancels it again at the end)
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if not ignores_cancel:
                    raise
            await asyncio.sleep(3600)
        return {"refunded": applied, "by": ctx.instance_id}

    return agent, runs, first_run


@pytest.mark.parametrize("ignores_cancel", [True, False], ids=["ignores-cancel", "cooperates"])
async def test_a_frozen_handlers_task_completes_on_another_instance_once(
    conn: MeshConnection, add_cleanup: Any, ignores_cancel: bool
) -> None:
    await start_router(conn, add_cleanup)
    agent, runs, first_run = frozen_once_agent(ignores_cancel)
    await start_worker(conn, add_cleanup, agent, instance_id="refunds-one")
    await start_worker(conn, add_cleanup, agent, instance_id="refunds-two")
    async with MeshClient(conn) as client:
        started = time.monotonic()
        result = await client.request("refund order 7", {"order": 7}, target="refunds", wait_s=30)
        took = time.monotonic() - started
        print(
            f"\nfrozen-worker recovery ({'ignores' if ignores_cancel else 'takes'} cancel): "
            f"{took:.2f} s"
        )  # the README's figure (pytest -s)
        assert first_run.is_set()
        assert result.status == "completed", result.error
        frozen_on, completed_on = runs
        assert frozen_on != completed_on, "another instance completed it"
        # applied once, by the run that froze, and not again
        assert result.output == {"refunded": False, "by": completed_on}
        assert took < TIMEOUT_S + 5.0
        effect = await conn.redis.get(conn.keys.side_effect(f"refund:{result.task_id}"))
        assert int(effect) == 1
        assert client.results_received == 1 and client.duplicate_results == 0
        if not ignores_cancel:  # the instance whose handler took the cancellation serves on
            again = await client.request("refund order 8", {"order": 8}, target="refunds")
            assert again.status == "completed"


async def test_a_handler_that_shows_progress_is_not_taken_for_frozen(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    agent = Agent("reports", "Writes long reports", processing_timeout_s=TIMEOUT_S)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        for _ in range(6):  # 3 x the processing timeout, alive all along
            await asyncio.sleep(TIMEOUT_S / 2)
            ctx.progress()
        return {"pages": 12}

    await start_worker(conn, add_cleanup, agent)
    async with MeshClient(conn) as client:
        result = await client.request("write the report", {}, target="reports", wait_s=20)
    assert result.status == "completed" and result.output == {"pages": 12}
