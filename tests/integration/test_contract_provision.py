"""What `mesh access provision` leaves on the broker is the contract table's fold: every
role's permissions and topic permissions equal `amqp_permissions` of its rows of
`mesh.contract.TABLE` (tests/unit/test_contract.py checks the table against the topology)."""

from __future__ import annotations

import asyncio

import pytest

from mesh.access.roles import NOTHING, amqp_permissions
from mesh.contract import Who, rows_of
from tests.integration.access_kit import Provisioned

pytestmark = pytest.mark.integration


async def test_the_broker_holds_the_tables_grant_for_every_role(
    mesh_access: Provisioned,
) -> None:
    management = mesh_access.management
    vhost = mesh_access.scope.vhost
    checked = set()
    for g in mesh_access.plan.grants:
        if g.role.kind == "admin":
            continue
        who = Who(mesh_access.topology, g.user, g.role.name)
        configure, write, read, topics = amqp_permissions(rows_of(g.role.kind), who)
        held = await asyncio.to_thread(management.permissions, vhost, g.user)
        assert held is not None, g.user
        assert (held["configure"], held["write"], held["read"]) == (configure, write, read)
        assert NOTHING not in (write, read), g.role.label  # every role does something
        held_topics = await asyncio.to_thread(management.topic_permissions, vhost, g.user)
        assert {t["exchange"]: (t["write"], t["read"]) for t in held_topics} == {
            tp.exchange: (tp.write, tp.read) for tp in topics
        }, g.role.label
        checked.add(g.role.kind)
    assert checked == {"router", "registry", "worker", "client", "observer"}
