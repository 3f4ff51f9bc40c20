"""Two tenants provisioned as the README shows (one vhost each, the same namespace in both)
on one broker and one Redis share no Redis key: every role of one is refused every key of
the other, and provisioning refuses a second scope that would share a tenant's keys.

Each refusal is asked with ``ACL DRYRUN`` (every key family, read and write) and the ones
of the findings are tried for real with the role's own login: the observer reading the
other tenant's Results, the worker reading its contexts and forging its Result, the
registry replacing its agent's profile.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import NoPermissionError

from mesh.access.provision import Credentials, Provisioner, ProvisionReport
from mesh.access.roles import AccessScope, Role, build_plan, redis_key_patterns, roles_for
from mesh.config import Settings
from mesh.dispatch import lua as dispatch_lua
from mesh.errors import TenantConflict
from mesh.keys import Keys
from mesh.management import Management
from mesh.topology import Topology
from tests import SCAN_COUNT

pytestmark = pytest.mark.integration

AGENT = "support.refunds"
ROLES = roles_for([AGENT], ["web"], ["ops"])


@asynccontextmanager
async def provisioned(
    provisioner: Provisioner, settings: Settings, scope: AccessScope
) -> AsyncIterator[ProvisionReport]:
    """`ROLES` in `scope` (a new vhost); everything goes at the end, keys included."""
    plan = build_plan(scope, Topology(namespace=scope.namespace), ROLES)
    try:
        yield await asyncio.to_thread(provisioner.provision, plan, create_vhost=True)
    finally:
        management = Management(settings)
        await asyncio.to_thread(provisioner.revoke, scope, delete_vhost=True)
        await asyncio.to_thread(management.delete_vhost, scope.vhost)
        cleaner = redis_asyncio.Redis.from_url(settings.redis_url.get_secret_value())
        try:
            for role in ROLES:
                await cleaner.acl_deluser(scope.user(role))
            pattern = Keys(scope.namespace, scope.vhost).pattern()
            keys = [k async for k in cleaner.scan_iter(match=pattern, count=SCAN_COUNT)]
            if keys:
                await cleaner.delete(*keys)
        finally:
            await cleaner.aclose()


@pytest.fixture
async def tenants(
    base_settings: Settings, provisioner: Provisioner
) -> AsyncIterator[tuple[ProvisionReport, ProvisionReport]]:
    """Tenants 1 and 2: the same namespace, one vhost each (the README's provisioning)."""
    tag = uuid.uuid4().hex[:8]
    async with AsyncExitStack() as stack:
        reports = [
            await stack.enter_async_context(
                provisioned(
                    provisioner,
                    base_settings,
                    AccessScope(base_settings.namespace, f"test-tenant{n}-{tag}"),
                )
            )
            for n in (1, 2)
        ]
        yield reports[0], reports[1]


def _creds(report: ProvisionReport, role: Role) -> Credentials:
    creds = report.of(role).credentials
    assert creds is not None
    return creds


def _a_key(pattern: str) -> str:
    """A key the family glob `pattern` matches (its ``*`` filled in)."""
    return pattern.replace("*", "x")


async def test_every_role_of_one_tenant_is_refused_every_key_of_the_other(
    tenants: tuple[ProvisionReport, ProvisionReport], base_settings: Settings
) -> None:
    one, two = tenants
    keys_one = Keys(one.plan.scope.namespace, one.plan.scope.vhost)
    assert one.plan.scope.namespace == two.plan.scope.namespace
    families = redis_key_patterns(keys_one.namespace, keys_one.vhost)
    foreign = [_a_key(p) for p in families.values()]
    foreign.append(keys_one.sealed(AGENT, "t1"))
    assert all(k.startswith(keys_one.prefix + ":") for k in foreign)
    plain = redis_asyncio.Redis.from_url(base_settings.redis_url.get_secret_value())
    try:
        for mine, theirs in ((two, one), (one, two)):
            other = Keys(theirs.plan.scope.namespace, theirs.plan.scope.vhost)
            keys = [_a_key(p) for p in redis_key_patterns(other.namespace, other.vhost).values()]
            keys.append(other.sealed(AGENT, "t1"))
            for grant in mine.plan.grants:
                for key in keys:
                    for command in (("GET", key), ("SET", key, "forged")):
                        verdict = await plain.acl_dryrun(grant.user, *command)
                        assert verdict != b"OK", f"{grant.user} may run {command}"
                # and what the role is for still works in its own tenant
                own = [r for r in grant.redis.keys if "~" in r]
                probe = ("GET", _a_key(own[0].split("~", 1)[1])) if own else ("PING",)
                verdict = await plain.acl_dryrun(grant.user, *probe)
                assert verdict == b"OK", (grant.user, probe, verdict)
    finally:
        await plain.aclose()


async def test_the_findings_refused_for_real_with_each_roles_own_login(
    tenants: tuple[ProvisionReport, ProvisionReport],
) -> None:
    one, two = tenants
    k1 = Keys(one.plan.scope.namespace, one.plan.scope.vhost)
    k2 = Keys(two.plan.scope.namespace, two.plan.scope.vhost)
    task = uuid.uuid4().hex
    admin_one = redis_asyncio.Redis.from_url(_creds(one, Role("admin")).redis_url)
    clients = [admin_one]
    try:
        # tenant 1 has a Result, a context and an agent profile
        await admin_one.hset(k1.idem(task), mapping={"result": "tenant one's"})
        await admin_one.set(k1.context(task, 1), "tenant one's context")
        await admin_one.hset(k1.agent(AGENT), mapping={"capability": "refunds"})

        def login(report: ProvisionReport, role: Role) -> redis_asyncio.Redis:
            client = redis_asyncio.Redis.from_url(_creds(report, role).redis_url)
            clients.append(client)
            return client

        observer = login(two, Role("observer", "ops"))
        worker = login(two, Role("worker", AGENT))
        registry = login(two, Role("registry"))
        attempts = [
            observer.hgetall(k1.idem(task)),
            worker.get(k1.context(task, 1)),
            worker.get(k1.for_agent(AGENT).context(task, 1, AGENT)),
            worker.hgetall(k1.idem(task)),
            worker.set(k1.sealed(AGENT, task), "forged"),
            # a mesh function on the other tenant's keys (its agent's view of the task)
            dispatch_lua.LIBRARY.bind(worker, "advance")(
                keys=[k1.for_agent(AGENT).task(task), k1.for_agent(AGENT).task_history(task)],
                args=[60_000, "forged", "", "", "submitted"],
            ),
            registry.hset(k1.agent(AGENT), "capability", "forged"),
        ]
        for attempt in attempts:
            with pytest.raises(NoPermissionError):
                await attempt
        # the same logins on their own tenant's keys
        assert await worker.set(k2.sealed(AGENT, task), "mine")
        # (a worker's contexts are in its agent's view: `mesh.dispatch.context`)
        assert await worker.set(k2.for_agent(AGENT).context(task, 1, AGENT), "mine")
        assert await registry.hset(k2.agent(AGENT), "capability", "refunds") == 1
        assert await observer.hget(k2.agent(AGENT), "capability") == b"refunds"
        assert await admin_one.hget(k1.agent(AGENT), "capability") == b"refunds"
        assert await admin_one.get(k1.sealed(AGENT, task)) is None
    finally:
        for client in clients:
            await client.aclose()


async def test_a_second_scope_on_a_tenants_keys_is_refused_before_anything_changes(
    base_settings: Settings, provisioner: Provisioner, scope: AccessScope
) -> None:
    topology = Topology(namespace=scope.namespace)
    first = build_plan(scope, topology, roles_for([AGENT]))
    await asyncio.to_thread(provisioner.provision, first, create_vhost=True)
    # the same vhost and namespace under another user prefix: the same keys
    twin = AccessScope(scope.namespace, scope.vhost, prefix=f"{scope.vhost}:twin:")
    with pytest.raises(TenantConflict, match=f"'{scope.user(Role('admin'))}' .another scope's"):
        await asyncio.to_thread(provisioner.provision, build_plan(twin, topology, roles_for()))
    management = Management(base_settings)
    assert await asyncio.to_thread(management.get_user, twin.user(Role("admin"))) is None
    # another vhost with the same namespace is another tenant: no conflict
    other = AccessScope(scope.namespace, f"{scope.vhost}-b")
    try:
        report = await asyncio.to_thread(
            provisioner.provision, build_plan(other, topology, roles_for()), create_vhost=True
        )
        assert {r.status for r in report.results} == {"created"}
    finally:
        await asyncio.to_thread(provisioner.revoke, other, delete_vhost=True)
