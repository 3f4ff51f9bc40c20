"""Helpers for the background loops of long-lived components."""

from __future__ import annotations

import asyncio


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that a library swallowed on its way through.

    Python 3.11 counts cancel requests on the task (`Task.cancelling`), even when the
    `CancelledError` never reached us: redis-py can turn one that lands inside a command
    into a connection reset. Every background loop calls this at the top of each round,
    so `close()` (cancel, then await the task) can never hang on a loop that kept going.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
