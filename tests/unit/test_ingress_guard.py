"""What a router believes of an ingress message's sender (access control on)."""

from __future__ import annotations

from mesh.access.refusal import Refusal
from mesh.access.roles import AccessScope, Role
from mesh.config import Settings
from mesh.router.guard import IngressGuard
from mesh.schemas import TaskEnvelope
from mesh.topology import Topology

SETTINGS = Settings(namespace="acme", access_control=True)
SCOPE = AccessScope.from_settings(SETTINGS)
GUARD = IngressGuard(SETTINGS, Topology.from_settings(SETTINGS))


def test_a_workers_handoff_comes_from_its_own_agent_whatever_the_body_claims() -> None:
    worker = SCOPE.user(Role("worker", "pay"))
    claimed = TaskEnvelope(capability="refund", source="refunds-boss", hops=1)
    checked = GUARD.check(claimed, worker)
    assert isinstance(checked, TaskEnvelope)
    assert checked.source == "pay" and checked.hops == 1  # the handoff's path is kept


def test_a_clients_task_starts_fresh_under_its_own_name() -> None:
    client = SCOPE.user(Role("client", "web"))
    checked = GUARD.check(TaskEnvelope(capability="x", source="admin", hops=7), client)
    assert isinstance(checked, TaskEnvelope)
    assert checked.source == client and checked.hops == 0


def test_nobody_jumps_the_queue_past_their_envelopes_priority() -> None:
    client = SCOPE.user(Role("client", "web"))
    refused = GUARD.check(TaskEnvelope(capability="x", priority=2), client, amqp_priority=10)
    assert isinstance(refused, Refusal) and refused.code == "priority_above_envelope"
    fine = GUARD.check(TaskEnvelope(capability="x", priority=2), client, amqp_priority=2)
    assert isinstance(fine, TaskEnvelope)
