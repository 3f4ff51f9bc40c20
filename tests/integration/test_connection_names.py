"""Connections are named ``<namespace>/<role>/<host>:<pid>`` in the management UI, so two
meshes (or two processes of one role) on one broker are told apart."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import pytest

from mesh.config import Settings
from mesh.connection import connect
from mesh.management import Management
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


async def test_the_management_api_shows_namespace_role_and_process(
    settings: Settings, add_cleanup: Any
) -> None:
    conn = await connect(settings, name="mesh-router")
    add_cleanup(conn.close)
    assert conn.connection_name.startswith(f"{settings.namespace}/router/")
    assert conn.connection_name.endswith(f":{os.getpid()}")
    management = Management(settings)

    async def listed() -> bool:
        rows = await asyncio.to_thread(management.connections)
        names = [r.get("client_properties", {}).get("connection_name") for r in rows]
        return conn.connection_name in names

    await wait_until(listed, timeout=15, interval=0.5)
