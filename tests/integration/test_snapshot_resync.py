"""A snapshot's resync says whether Redis held anything its events had not brought."""

from __future__ import annotations

from typing import Any

import pytest

from mesh.connection import MeshConnection
from mesh.registry.snapshot import AgentSnapshot
from tests.integration.test_registry import registration, registry, session

pytestmark = pytest.mark.integration


async def test_resync_reports_what_the_events_missed_and_nothing_after(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await registry(conn, add_cleanup)
    await session(conn, add_cleanup, registration("orders", capability_text="Looks up orders"))
    snapshot = AgentSnapshot(conn)  # not started: it follows no events, so it missed orders
    changes: list[str] = []
    snapshot.on_change(changes.append)
    assert await snapshot.resync() is True
    assert changes == ["orders"] and snapshot.is_live("orders")
    assert await snapshot.resync() is False  # nothing new: the resync loop backs off
    assert changes == ["orders"]
