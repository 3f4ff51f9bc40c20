"""`bench/load.py --access on`: the load mesh under access control, as the README provisions it.

`provisioned` creates a throwaway vhost with one broker and Redis ACL user per role (admin,
router, registry, ``worker.<agent_id>`` per agent, ``client.bench``) through
`mesh.access.provision.Provisioner`, as ``mesh access provision --create-vhost --keep-guest
--keep-redis-default`` does: the shared broker's ``guest`` and Redis' ``default`` user are
never touched. The admin applies the topology and every agent's queues; each mesh process
then runs with its role's login, ``MESH_ACCESS_CONTROL=true`` and ``MESH_TOPOLOGY=passive``
(`Tenant.env`). On exit the users, their Redis ACL users, the vhost and the tenant's Redis
keys are deleted, also when the run failed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import redis.asyncio as redis_asyncio
from pydantic import SecretStr

from mesh.access.provision import Credentials, Provisioner, write_secret_file
from mesh.access.roles import AccessScope, Role, build_plan, roles_for
from mesh.config import Settings
from mesh.connection import connect
from mesh.keys import Keys
from mesh.management import Management
from mesh.topology import Topology

#: the bench client's name (`client.bench`)
CLIENT = "bench"


@dataclass(frozen=True, slots=True)
class Tenant:
    """The provisioned scope of one bench namespace and each role's credentials."""

    base: Settings
    scope: AccessScope
    creds: dict[Role, Credentials]

    def settings(self, role: Role) -> Settings:
        """`base` logged in as `role`, access control on (the admin applies the topology)."""
        c = self.creds[role]
        return self.base.model_copy(
            update={
                "amqp_url": SecretStr(c.amqp_url),
                "redis_url": SecretStr(c.redis_url),
                "access_control": True,
                "topology": "apply" if role.kind == "admin" else "passive",
            }
        )

    def env(self, role: Role) -> dict[str, str]:
        """The environment a mesh process of `role` runs with (its role's env file and the
        two settings the README names)."""
        c = self.creds[role]
        return {
            "MESH_AMQP_URL": c.amqp_url,
            "MESH_REDIS_URL": c.redis_url,
            "MESH_ACCESS_CONTROL": "true",
            "MESH_TOPOLOGY": "passive",
        }

    def write_logins(self, path: Path, agents: Sequence[str]) -> Path:
        """Each agent's worker login (agent_id -> [amqp_url, redis_url]) into `path` (0600),
        what `bench/load_logins.py` reads from ``LOAD_LOGINS``."""
        logins = {}
        for agent_id in agents:
            c = self.creds[Role("worker", agent_id)]
            logins[agent_id] = [c.amqp_url, c.redis_url]
        write_secret_file(path, json.dumps(logins))
        return path


async def _apply_topology(tenant: Tenant, agents: Sequence[str]) -> None:
    """As the admin: the mesh topology and each agent's queues (`mesh topology apply`)."""
    async with await connect(tenant.settings(Role("admin")), name="bench-load-admin") as admin:
        channel = await admin.channel()
        try:
            await admin.topology.declare(channel, apply=True)
            for agent_id in agents:
                await admin.topology.declare(
                    channel, admin.topology.agent_spec(agent_id), apply=True
                )
        finally:
            await channel.close()


@asynccontextmanager
async def provisioned(base: Settings, agents: Sequence[str]) -> AsyncIterator[Tenant]:
    """A fresh vhost for `base.namespace` with every role of the load mesh; removed on exit."""
    scope = AccessScope(base.namespace, f"bench-ac-{uuid.uuid4().hex[:8]}")
    roles = roles_for(agents, [CLIENT])
    plan = build_plan(scope, Topology(namespace=base.namespace), roles)
    provisioner = Provisioner.from_settings(base)
    try:
        # guest=None, redis_default_off=False: --keep-guest --keep-redis-default
        report = await asyncio.to_thread(provisioner.provision, plan, create_vhost=True)
        creds = {}
        for role in roles:
            c = report.of(role).credentials
            if c is None:
                raise RuntimeError(f"no credentials for {role.label}")
            creds[role] = c
        tenant = Tenant(base, scope, creds)
        await _apply_topology(tenant, agents)
        yield tenant
    finally:
        await _remove(base, scope, roles, provisioner)


async def _remove(
    base: Settings, scope: AccessScope, roles: Sequence[Role], provisioner: Provisioner
) -> None:
    """The scope's users, Redis ACL users, vhost and keys; never guest nor `default`."""
    try:
        await asyncio.to_thread(provisioner.revoke, scope, delete_vhost=True)
    except Exception:  # a half-provisioned scope: remove what exists, one by one below
        management = Management(base)
        await asyncio.to_thread(management.delete_vhost, scope.vhost)
        for user in await asyncio.to_thread(provisioner.provisioned_users, scope):
            await asyncio.to_thread(management.delete_user, user)
    finally:
        cleaner = redis_asyncio.Redis.from_url(base.redis_url.get_secret_value())
        try:
            users = [scope.user(r) for r in roles]
            if users:
                await cleaner.execute_command("ACL", "DELUSER", *users)
            pattern = Keys(scope.namespace, scope.vhost).pattern()
            keys = [k async for k in cleaner.scan_iter(match=pattern, count=1000)]
            for i in range(0, len(keys), 1000):
                await cleaner.delete(*keys[i : i + 1000])
        finally:
            await cleaner.aclose()
            provisioner.close()


__all__ = ["CLIENT", "Tenant", "provisioned"]
