"""Settings and environment of a worker the test starts as a process (any language)."""

from __future__ import annotations

import os

from mesh.access.roles import Role
from mesh.config import Settings
from mesh.connection import MeshConnection
from tests import access_mode


async def worker_settings(conn: MeshConnection, agent_id: str) -> Settings:
    """The test's settings, or under access control those of the agent's provisioned worker
    user (`tests.access_mode`), after the admin declared the agent's queue."""
    mode = access_mode.of(conn)
    if mode is None:
        return conn.settings
    await mode.declare(conn, agent_id)
    return await mode.settings_of(Role("worker", agent_id), conn.settings)


def settings_env(settings: Settings) -> dict[str, str]:
    """The process environment that gives a worker `settings` (the ones tests change)."""
    return {
        **os.environ,
        "MESH_NAMESPACE": settings.namespace,
        "MESH_AMQP_URL": settings.amqp_url.get_secret_value(),
        "MESH_REDIS_URL": settings.redis_url.get_secret_value(),
        "MESH_ACCESS_CONTROL": "true" if settings.access_control else "false",
        "MESH_TOPOLOGY": settings.topology,
        "MESH_HEARTBEAT_S": str(settings.heartbeat_s),
        "MESH_LEASE_TTL_S": str(settings.lease_ttl_s),
    }
