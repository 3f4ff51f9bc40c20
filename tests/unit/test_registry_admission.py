"""`Admission`: which broker user may speak for which agent (pure rules)."""

from __future__ import annotations

from mesh.config import Settings
from mesh.registry.admission import Admission


def _admission(**fields: object) -> Admission:
    return Admission(Settings(namespace="mesh", access_control=True, **fields))


def test_off_accepts_everything() -> None:
    assert Admission(Settings()).refusal(None, "a", "zzz") is None


def test_the_provisioned_worker_user_speaks_for_its_agent_only() -> None:
    admission = _admission()
    assert admission.refusal("mesh:worker.pay", "pay", "pay-1") is None
    refusal = admission.refusal("mesh:worker.pay", "refunds", "refunds-1")
    assert refusal is not None and refusal.code == "not_your_agent"
    # another namespace's user, a router, or no user at all: never
    assert admission.refusal("other:worker.pay", "pay", "pay-1") is not None
    assert admission.refusal("mesh:router", "pay", "pay-1") is not None
    missing = admission.refusal(None, "pay", "pay-1")
    assert missing is not None and missing.code == "no_user_id"


def test_instance_ids_start_with_the_agent_id() -> None:
    refusal = _admission().refusal("mesh:worker.pay", "pay", "payroll-1")
    assert refusal is not None and refusal.code == "bad_instance_id"


def test_an_instance_suffix_has_no_dot() -> None:
    """The worker's reply queue is named after its instance, and its grant matches
    ``<agent>-<suffix without dots>``: ``pay-1.x`` would be another user's name part."""
    admission = _admission()
    assert admission.refusal("mesh:worker.team.pay", "team.pay", "team.pay-1") is None
    refusal = admission.refusal("mesh:worker.pay", "pay", "pay-1.x")
    assert refusal is not None and refusal.code == "bad_instance_id"


def test_a_vhost_and_a_prefix_and_an_explicit_map() -> None:
    in_vhost = Admission(
        Settings(
            namespace="mesh",
            access_control=True,
            amqp_url="amqp://u:p@127.0.0.1:5672/tenant1",
        )
    )
    assert in_vhost.agents_of("tenant1:mesh:worker.pay") == {"pay"}
    mapped = _admission(access_user_prefix="", agent_users={"legacy": ["pay", "refunds"]})
    assert mapped.agents_of("legacy") == {"pay", "refunds"}
    assert mapped.agents_of("worker.pay") == {"pay"}
