"""The processing timeout: a frozen handler gives its task back.

A handler that hangs while its process stays connected and heartbeating would keep its
task until the deadline or the maximum lifetime. `watched` runs the handler's chain as a
task of its own and watches its progress (`TaskContext.progress`): with no sign of life for
`timeout_s` it cancels it, and whether the handler then ends (it took the cancellation) or
not (it ignores it; it is left behind, its claim released, so neither its late commit nor
its `apply_once` counts), the caller's task is not its any more: `watched` returns None
and the runtime hands the task back to the agent's queue, where another instance takes it.
A worker that stops and whose grace is over ends its handlers the same way (`stop`): their
tasks go back to the agent's own queue, for another instance or the restarted one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mesh.worker.middleware import TaskRun
from mesh.worker.outcome import Outcome

logger = logging.getLogger(__name__)

#: how long a cancelled handler may take to end before it is left behind
CANCEL_GRACE_S = 1.0


class Stop:
    """A flag set once (the worker stops and its grace is over) that every run in flight
    watches through one shared future: no task per run waiting on an event."""

    def __init__(self) -> None:
        self._set = False
        self._future: asyncio.Future[None] | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        if self._future is not None and not self._future.done():
            self._future.set_result(None)

    def future(self) -> asyncio.Future[None]:
        """Done once `set` was called (made on first use, in the running loop)."""
        if self._future is None:
            self._future = asyncio.get_running_loop().create_future()
            if self._set:
                self._future.set_result(None)
        return self._future


async def watched(
    run: TaskRun,
    execute: Callable[[TaskRun], Awaitable[Outcome]],
    timeout_s: float,
    stop: Stop | None = None,
) -> Outcome | None:
    """`execute(run)`, or None when it made no progress for `timeout_s` (frozen) or when
    `stop` was set first (the worker stops and its grace is over: the task goes back)."""
    runner = asyncio.ensure_future(execute(run))
    stopping = stop.future() if stop is not None else None
    watching: set[asyncio.Future[Any]] = {runner} if stopping is None else {runner, stopping}
    try:
        while True:
            left = run.ctx.last_progress + timeout_s - time.monotonic()
            if left <= 0:
                break
            done, _ = await asyncio.wait(
                watching, timeout=left, return_when=asyncio.FIRST_COMPLETED
            )
            if runner in done:
                return runner.result()
            if stopping is not None and stopping in done:
                break
    except asyncio.CancelledError:
        runner.cancel()
        raise
    if stop is not None and stop.is_set():
        logger.info("task_id=%s: the worker stops; cancelling the handler", run.task_id)
    else:
        logger.warning(
            "task_id=%s: no progress for processing_timeout_s=%g; cancelling the handler "
            "and handing the task back",
            run.task_id,
            timeout_s,
        )
    runner.cancel()
    done, _ = await asyncio.wait({runner}, timeout=CANCEL_GRACE_S)
    if not done:
        logger.error(
            "task_id=%s: the handler ignores its cancellation; left behind (its claim is "
            "released: nothing it does from now on counts)",
            run.task_id,
        )
    runner.add_done_callback(_forget)
    return None


def _forget(task: asyncio.Future[Outcome]) -> None:
    """A handler left behind ends some day: its outcome is nobody's any more."""
    if not task.cancelled() and task.exception() is not None:
        logger.info("a handler left behind ended with %r", task.exception())


__all__ = ["CANCEL_GRACE_S", "Stop", "watched"]
