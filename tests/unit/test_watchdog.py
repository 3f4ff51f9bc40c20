"""`watched`: a handler's outcome, or None when the worker's `Stop` is set first."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any, cast

from mesh.worker.middleware import TaskRun
from mesh.worker.outcome import Outcome
from mesh.worker.watchdog import Stop, watched


def _run() -> TaskRun:
    return cast(
        TaskRun, SimpleNamespace(task_id="t1", ctx=SimpleNamespace(last_progress=time.monotonic()))
    )


async def test_runs_share_one_stop_and_end_with_their_outcome_until_it_is_set() -> None:
    stop = Stop()
    release = asyncio.Event()
    cancelled: list[str] = []

    async def quick(run: TaskRun) -> Outcome:
        return Outcome("completed", output={"ok": True})

    async def waits(run: TaskRun) -> Outcome:
        try:
            await release.wait()
        except asyncio.CancelledError:
            cancelled.append(run.task_id)
            raise
        return Outcome("completed")

    # many runs watch the one future; a finished run leaves it untouched
    outcomes = await asyncio.gather(*(watched(_run(), quick, 30, stop=stop) for _ in range(5)))
    assert [o.output if o else None for o in outcomes] == [{"ok": True}] * 5
    assert not stop.is_set() and not stop.future().done()

    pending: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(watched(_run(), waits, 30, stop=stop)) for _ in range(3)
    ]
    await asyncio.sleep(0)
    stop.set()
    assert await asyncio.wait_for(asyncio.gather(*pending), 5) == [None, None, None]
    assert cancelled == ["t1"] * 3 and stop.is_set()
    # a run that starts once the worker stops ends at once, its handler cancelled
    assert await asyncio.wait_for(watched(_run(), waits, 30, stop=stop), 5) is None
    assert len(cancelled) == 4


async def test_a_stop_set_before_its_future_is_made_is_done() -> None:
    stop = Stop()
    stop.set()
    assert stop.future().done()
