"""The suite's access-control mode: ``MESH_TEST_ACCESS_CONTROL=1``.

In it every test namespace gets its own vhost with a broker and Redis ACL user per role
(`mesh.access.provision`, as ``mesh access provision`` does), and the shared fixtures run
each component under its own user with access control on:

- the test's own connection (`conn`, `mesh_env`) logs in as ``admin``: it applies the
  topology, plays the caller, and reads Redis for the assertions;
- `dispatch_kit.start_router` runs the router as ``router``, `dispatch_kit.start_worker`
  runs each agent as ``worker.<agent_id>`` (provisioned on first use), both with
  ``MESH_TOPOLOGY=passive`` after the admin declared what they need.

So Results travel through the results exchange and a router's forwarder, every publish is
checked against its login by the broker, and every Redis command against the role's ACL.
``infra/test.sh`` runs the modules of `MODULES` a second time in this mode; the
refusals themselves are proven by ``tests/integration/test_access_*.py``. Everything
provisioned goes at teardown: the vhost, the users and the Redis ACL users.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass, field

import redis.asyncio as redis_asyncio
from pydantic import SecretStr

from mesh.access.provision import Credentials, Provisioner
from mesh.access.roles import AccessScope, Role, build_plan, roles_for
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.keys import Keys
from mesh.management import Management
from mesh.topology import Topology, TopologySpec
from tests import SCAN_COUNT

ENABLED = os.environ.get("MESH_TEST_ACCESS_CONTROL") == "1"

#: the modules ``infra/test.sh`` runs again with access control on (paths from the root):
#: the ones that build their mesh from the shared fixtures, `dispatch_kit` and
#: `routing_kit` (every story; test_story_worker_stop's `mesh worker` processes log in as
#: the agent's worker user, `AccessMode.settings_of`). Not here: plain-AMQP callers with
#: server-named reply queues (test_standard_rpc: under access control a caller's reply
#: queue is its user's), tests that start the mesh's services as processes with the shared
#: user or restart the broker, Redis or the cluster.
MODULES = (
    "tests/integration/test_dispatch_backlog.py",
    "tests/integration/test_dispatch_failures.py",
    "tests/integration/test_dispatch_handoff.py",
    "tests/integration/test_dispatch_idempotency.py",
    "tests/integration/test_dispatch_states.py",
    "tests/integration/test_dispatch_lifetime.py",
    "tests/integration/test_dispatch_invalid.py",
    "tests/integration/test_dispatch_started.py",
    "tests/integration/test_dispatch_retry_topic.py",
    "tests/integration/test_dispatch_quorum.py",
    "tests/integration/test_dispatch_routers.py",
    "tests/integration/test_worker_bad_output.py",
    "tests/integration/test_dlq.py",
    "tests/integration/test_routing.py",
    "tests/integration/test_router_bug.py",
    "tests/integration/test_story_frozen_worker.py",
    "tests/integration/test_story_timeout_cascade.py",
    "tests/integration/test_story_field_mismatch.py",
    "tests/integration/test_node_agent.py",
    "tests/integration/test_story_compound_request.py",
    "tests/integration/test_story_below_threshold.py",
    "tests/integration/test_story_priority_backlog.py",
    "tests/integration/test_story_router_down.py",
    "tests/integration/test_story_agent_gone.py",
    "tests/integration/test_story_rolling_restart.py",
    "tests/integration/test_story_worker_stop.py",
)


@dataclass
class AccessMode:
    """The provisioned vhost of one test namespace, and a connection per role."""

    base: Settings
    scope: AccessScope
    provisioner: Provisioner
    creds: dict[Role, Credentials] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)

    @classmethod
    async def start(cls, base: Settings) -> AccessMode:
        scope = AccessScope(base.namespace, f"test-am-{uuid.uuid4().hex[:10]}")
        mode = cls(base, scope, Provisioner.from_settings(base))
        await mode._provision(roles_for(), create_vhost=True)
        return mode

    @property
    def topology(self) -> Topology:
        return Topology.from_settings(self.base)

    async def _provision(self, roles: list[Role], *, create_vhost: bool = False) -> None:
        plan = build_plan(self.scope, self.topology, roles)
        report = await asyncio.to_thread(
            self.provisioner.provision, plan, create_vhost=create_vhost
        )
        for role in roles:
            creds = report.of(role).credentials
            assert creds is not None, f"no credentials for {role.label}"
            self.creds[role] = creds

    def settings_for(self, role: Role, base: Settings | None = None) -> Settings:
        """`base` (the test's settings), logged in as `role`, access control on."""
        creds = self.creds[role]
        return (base or self.base).model_copy(
            update={
                "amqp_url": SecretStr(creds.amqp_url),
                "redis_url": SecretStr(creds.redis_url),
                "access_control": True,
                "topology": "apply" if role.kind == "admin" else "passive",
            }
        )

    async def open(self, role: Role, name: str, base: Settings | None = None) -> MeshConnection:
        """A connection as `role` with `base`'s other settings (a test may change them)."""
        return await connect(await self.settings_of(role, base), name=f"{name}[{role.label}]")

    async def settings_of(self, role: Role, base: Settings | None = None) -> Settings:
        """`settings_for` `role`, provisioned on first use (a process started with them)."""
        if role not in self.creds:
            await self._provision([role])
        return self.settings_for(role, base)

    async def declare(self, admin: MeshConnection, agent_id: str | None = None) -> None:
        """As admin: the mesh topology (once), and `agent_id`'s queues (once each)."""
        wanted: list[tuple[str, TopologySpec | None]] = (
            [("", None)] if "" not in self.declared else []
        )
        if agent_id is not None and agent_id not in self.declared:
            wanted.append((agent_id, admin.topology.agent_spec(agent_id)))
        if not wanted:
            return
        channel = await admin.channel()
        try:
            for name, spec in wanted:
                await admin.topology.declare(channel, spec)
                self.declared.add(name)
        finally:
            await channel.close()

    async def close(self) -> None:
        management = Management(self.base)
        try:
            await asyncio.to_thread(self.provisioner.revoke, self.scope, delete_vhost=True)
        finally:
            await asyncio.to_thread(management.delete_vhost, self.scope.vhost)
            for user in await asyncio.to_thread(self.provisioner.provisioned_users, self.scope):
                await asyncio.to_thread(management.delete_user, user)
            cleaner = redis_asyncio.Redis.from_url(self.base.redis_url.get_secret_value())
            try:
                for role in self.creds:
                    await cleaner.acl_deluser(self.scope.user(role))
                keys = [
                    k
                    async for k in cleaner.scan_iter(
                        match=Keys(self.scope.namespace, self.scope.vhost).pattern(),
                        count=SCAN_COUNT,
                    )
                ]
                if keys:
                    await cleaner.delete(*keys)
            finally:
                await cleaner.aclose()
                self.provisioner.close()


#: the access mode of each running test namespace
_MODES: dict[str, AccessMode] = {}


def register(mode: AccessMode) -> None:
    _MODES[mode.scope.namespace] = mode


def unregister(mode: AccessMode) -> None:
    _MODES.pop(mode.scope.namespace, None)


def tap_queue_name(conn: MeshConnection) -> str:
    """A test's own listening queue: in the namespace, where its admin may declare it."""
    return f"{conn.topology.namespace}.tap.{uuid.uuid4().hex[:10]}"


def of(conn: MeshConnection) -> AccessMode | None:
    """The access mode `conn`'s namespace runs in (None: access control off)."""
    return _MODES.get(conn.settings.namespace) if ENABLED else None
