"""Fixtures of the access-control tests (`tests.integration.access_kit` has the rest)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis.asyncio as redis_asyncio

from mesh.access.provision import Credentials, Provisioner
from mesh.access.roles import AccessScope, Role, build_plan, roles_for
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.keys import Keys
from mesh.management import Management
from mesh.router.embedding import Embedder, build_embedder
from mesh.topology import Topology, declare_spec
from tests import SCAN_COUNT
from tests.integration.access_kit import (
    AGENT_A,
    AGENT_B,
    CLIENT,
    DEAD_LETTER_CAP,
    OBSERVER,
    Provisioned,
    plan_for,
    role_settings,
)
from tests.integration.routing_kit import SemanticMesh


@pytest.fixture
def base_settings() -> Settings:
    return Settings.from_env(namespace=f"test.{uuid.uuid4().hex[:12]}")


@pytest.fixture
async def provisioner(base_settings: Settings) -> AsyncIterator[Provisioner]:
    p = Provisioner.from_settings(base_settings)
    yield p
    p.close()


@pytest.fixture
async def scope(base_settings: Settings, provisioner: Provisioner) -> AsyncIterator[AccessScope]:
    """A fresh vhost name; at teardown everything provisioned in it goes, and the vhost."""
    scope = AccessScope(base_settings.namespace, f"test-access-{uuid.uuid4().hex[:10]}")
    yield scope
    management = Management(base_settings)
    try:
        await asyncio.to_thread(provisioner.revoke, scope, delete_vhost=True)
    finally:
        # whatever revoke could not reach: the vhost, and users tagged in this scope
        await asyncio.to_thread(management.delete_vhost, scope.vhost)
        for user in await asyncio.to_thread(provisioner.provisioned_users, scope):
            await asyncio.to_thread(management.delete_user, user)
        cleaner = redis_asyncio.Redis.from_url(base_settings.redis_url.get_secret_value())
        try:
            for role in roles_for([AGENT_A, AGENT_B, "gamma"], [CLIENT], [OBSERVER]):
                await cleaner.execute_command("ACL", "DELUSER", scope.user(role))
            pattern = Keys(scope.namespace, scope.vhost).pattern()
            keys = [k async for k in cleaner.scan_iter(match=pattern, count=SCAN_COUNT)]
            if keys:
                await cleaner.delete(*keys)
        finally:
            await cleaner.aclose()


@pytest.fixture
async def mesh_access(
    base_settings: Settings, provisioner: Provisioner, scope: AccessScope
) -> Provisioned:
    """Provision two agents, a client and an observer; apply the topology as admin."""
    plan = plan_for(
        scope, [AGENT_A, AGENT_B], dead_letter_max_bytes=DEAD_LETTER_CAP, max_queues=200
    )
    report = await asyncio.to_thread(provisioner.provision, plan, create_vhost=True)
    admin = report.of(Role("admin")).credentials
    assert admin is not None
    settings = Settings.from_env(
        namespace=scope.namespace, amqp_url=admin.amqp_url, redis_url=admin.redis_url
    )
    topology = Topology.from_settings(settings)
    async with await connect(settings, name="test-access-admin") as conn:
        channel = await conn.channel()
        await topology.declare(channel)
        for agent in (AGENT_A, AGENT_B):
            await declare_spec(channel, topology.agent_spec(agent))
        await channel.close()
    return Provisioned(
        settings,
        scope,
        topology,
        plan,
        report,
        provisioner,
        Management(base_settings),
        base_settings.redis_url.get_secret_value(),
    )


@pytest.fixture
async def as_user(mesh_access: Provisioned) -> AsyncIterator[Any]:
    """``await as_user(role)``: a connection logged in as `role` (access control on). A
    client the base plan lacks is provisioned on first use and removed at teardown."""
    extra: dict[Role, Credentials] = {}
    opened: list[MeshConnection] = []

    async def open_as(role: Role) -> MeshConnection:
        creds = extra.get(role)
        if creds is None:
            try:
                creds = mesh_access.creds(role)
            except KeyError:
                plan = build_plan(mesh_access.scope, mesh_access.topology, [role])
                report = await asyncio.to_thread(mesh_access.provisioner.provision, plan)
                found = report.of(role).credentials
                assert found is not None
                creds = extra[role] = found
        settings = role_settings(mesh_access, creds.amqp_url, creds.redis_url)
        conn = await connect(settings, name=f"access-{role.label}")
        opened.append(conn)
        return conn

    yield open_as
    for conn in reversed(opened):
        await conn.close()
    cleaner = redis_asyncio.Redis.from_url(mesh_access.base_redis_url)
    try:
        for role in extra:
            await cleaner.execute_command("ACL", "DELUSER", mesh_access.user(role))
    finally:
        await cleaner.aclose()


# --- a semantic mesh (the routing and story tests) --------------------------------------------
@pytest.fixture(scope="session")
def embedder() -> Iterator[Embedder]:
    """The router's model, loaded once for the whole run."""
    e = build_embedder(Settings())
    e.start()
    yield e


@pytest.fixture
async def mesh(conn: MeshConnection, embedder: Embedder) -> AsyncIterator[SemanticMesh]:
    """Registry, semantic router and workers in this process (`SemanticMesh.start`)."""
    m = SemanticMesh(conn, embedder)
    yield m
    await m.close()
