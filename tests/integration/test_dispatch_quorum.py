"""queue_type="quorum": priority bands per agent, the worker drains all three."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from tests.agents_for_tests import effect_agent
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(namespace=namespace, queue_type="quorum")


async def test_quorum_bands_round_trip(conn: MeshConnection, add_cleanup: Any) -> None:
    await start_router(conn, add_cleanup)
    worker = await start_worker(conn, add_cleanup, effect_agent())
    assert len(worker._consumers) == 3
    async with MeshClient(conn) as client:
        results = await asyncio.gather(
            *(
                client.request("do", {"n": p}, target="effect", priority=p, wait_s=20)
                for p in (1, 5, 9)
            )
        )
    assert [r.status for r in results] == ["completed"] * 3
    assert worker.executed == 3
