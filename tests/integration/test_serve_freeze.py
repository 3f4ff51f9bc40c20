"""A service builds at start what it keeps for its life; the collector stops walking it once
the service runs (`mesh.cli._runner.freeze_start_objects`)."""

from __future__ import annotations

import asyncio
import gc
import os
import signal

import pytest

from mesh.cli._runner import serve
from mesh.config import Settings
from mesh.connection import MeshConnection
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


async def test_what_a_service_built_at_start_is_frozen_once_it_runs(settings: Settings) -> None:
    built: list[object] = []
    frozen_at_stop: list[int] = []
    tasks: list[asyncio.Task[None]] = []

    async def starter(conn: MeshConnection) -> object:
        built.append([{"state": n} for n in range(1_000)])  # what a start keeps

        async def running() -> None:
            await wait_until(lambda: gc.get_freeze_count() > 0, timeout=10)
            os.kill(os.getpid(), signal.SIGTERM)  # the service stops as a signal stops it

        async def stop() -> None:
            frozen_at_stop.append(gc.get_freeze_count())

        tasks.append(asyncio.create_task(running()))
        return stop

    gc.unfreeze()
    try:
        assert await asyncio.wait_for(serve(settings, "test-freeze", starter), timeout=30) == 0
    finally:
        gc.unfreeze()
    assert frozen_at_stop and frozen_at_stop[0] >= 1_000
    assert tasks[0].done() and tasks[0].exception() is None
