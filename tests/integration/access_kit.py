"""Shared by the access-control tests: a provisioned vhost with a user per role.

`mesh_access` provisions two agents, a client and an observer in a fresh vhost and
namespace, applies the topology there as the provisioned admin, and revokes everything
(and deletes the vhost) at teardown, also when a test fails.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aio_pika

from mesh.access.provision import Credentials, Provisioner, ProvisionReport
from mesh.access.roles import AccessScope, Plan, Role, build_plan, roles_for
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.management import Management
from mesh.router.service import RouterService
from mesh.topology import Topology

AGENT_A = "team.alpha"
AGENT_B = "team.beta"
CLIENT = "web"
OBSERVER = "ops"


@dataclass
class Provisioned:
    settings: Settings
    scope: AccessScope
    topology: Topology
    plan: Plan
    report: ProvisionReport
    provisioner: Provisioner
    management: Management
    base_redis_url: str

    def creds(self, role: Role) -> Credentials:
        creds = self.report.of(role).credentials
        assert creds is not None
        return creds

    def user(self, role: Role) -> str:
        return self.scope.user(role)


#: a dead-letter cap small enough to hit in a test
DEAD_LETTER_CAP = 1024


def plan_for(scope: AccessScope, agents: list[str], **options: int) -> Plan:
    topology = Topology(namespace=scope.namespace)
    return build_plan(scope, topology, roles_for(agents, [CLIENT], [OBSERVER]), **options)


#: opens a plain AMQP connection as a provisioned user (the `login` fixture)
Opener = Callable[[Credentials], Awaitable[aio_pika.abc.AbstractConnection]]


def role_settings(mesh_access: Provisioned, amqp_url: str, redis_url: str) -> Settings:
    """A process of the provisioned mesh: its login, access control on, topology passive."""
    return Settings.from_env(
        namespace=mesh_access.scope.namespace,
        amqp_url=amqp_url,
        redis_url=redis_url,
        topology="passive",
        access_control=True,
        heartbeat_s=0.5,
        lease_ttl_s=3.0,
    )


async def start_router_as(
    as_user: Callable[[Role], Awaitable[MeshConnection]], add_cleanup: Any
) -> RouterService:
    """A router under the router role's login, closed at the test's cleanup."""
    router = RouterService(await as_user(Role("router")))
    await router.start()
    add_cleanup(router.close)
    return router
