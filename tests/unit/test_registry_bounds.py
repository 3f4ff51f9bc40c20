"""`ProfileBounds`: what an agent's own credential may claim in its profile (pure rules)."""

from __future__ import annotations

from typing import Any

from mesh.config import Settings
from mesh.registry.bounds import ProfileBounds, same_profile
from mesh.schemas import Registration


def _reg(**fields: Any) -> Registration:
    values: dict[str, Any] = {"agent_id": "pay", "instance_id": "pay-1", "capability_text": "pays"}
    return Registration(**{**values, **fields})


def test_no_positive_priority_bonus_unless_the_operator_grants_it() -> None:
    bounds = ProfileBounds(Settings())
    assert bounds.refusal(_reg()) is None
    assert bounds.refusal(_reg(priority_bonus=-0.5)) is None  # lowering oneself is free
    refusal = bounds.refusal(_reg(priority_bonus=1.0))
    assert refusal is not None and refusal.code == "priority_bonus_too_high"
    assert "MESH_PRIORITY_BONUS_LIMITS" in refusal.message


def test_the_operators_limits_per_agent_and_by_default() -> None:
    bounds = ProfileBounds(Settings(max_priority_bonus=0.1, priority_bonus_limits={"pay": 0.3}))
    assert bounds.refusal(_reg(priority_bonus=0.3)) is None
    assert bounds.refusal(_reg(priority_bonus=0.4)) is not None
    other = {"agent_id": "ship", "instance_id": "ship-1"}
    assert bounds.refusal(_reg(priority_bonus=0.1, **other)) is None
    assert bounds.refusal(_reg(priority_bonus=0.2, **other)) is not None


def test_limits_from_the_environment_are_a_json_object() -> None:
    settings = Settings.from_env({"MESH_PRIORITY_BONUS_LIMITS": '{"pay": 0.25}'})
    assert settings.priority_bonus_limits == {"pay": 0.25}


def test_max_concurrency_is_bounded() -> None:
    bounds = ProfileBounds(Settings(max_instance_concurrency=64))
    assert bounds.refusal(_reg(max_concurrency=64)) is None
    refusal = bounds.refusal(_reg(max_concurrency=65))
    assert refusal is not None and refusal.code == "max_concurrency_too_high"
    assert bounds.concurrency(10_000) == 64 and bounds.concurrency(3) == 3


def test_a_profile_changes_at_most_once_per_interval() -> None:
    bounds = ProfileBounds(Settings(profile_change_interval_s=5.0))
    current = _reg(capability_text="pays invoices")
    changed = _reg(capability_text="pays invoices and refunds", instance_id="pay-2")
    refusal = bounds.change_refusal(changed, current, 1_000, 3_000)
    assert refusal is not None and refusal.code == "profile_change_too_soon"
    assert "3000 ms" in refusal.message
    assert bounds.change_refusal(changed, current, 1_000, 6_000) is None
    # the same profile (a new instance, other concurrency) and a first profile: never held
    same = _reg(capability_text="pays invoices", instance_id="pay-9", max_concurrency=8)
    assert same_profile(same, current)
    assert bounds.change_refusal(same, current, 1_000, 1_001) is None
    assert bounds.change_refusal(changed, None, None, 1_001) is None
    # any field of the profile counts, the bonus too
    assert not same_profile(_reg(priority_bonus=-0.1), _reg())
    assert (
        ProfileBounds(Settings(profile_change_interval_s=0)).change_refusal(
            changed, current, 1_000, 1_001
        )
        is None
    )
