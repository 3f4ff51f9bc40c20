"""The per-user ingress budget: a token bucket of messages and bytes per broker user."""

from __future__ import annotations

from mesh.config import Settings
from mesh.router.budget import IngressBudget


def test_no_limit_by_default() -> None:
    budget = IngressBudget(Settings())
    assert not budget.limited
    assert all(budget.allow("u", 10**9, now=0.0) for _ in range(10_000))


def test_a_user_gets_its_burst_then_its_rate_and_others_are_untouched() -> None:
    budget = IngressBudget(Settings(ingress_rate_per_user=10, ingress_burst_s=2))
    assert [budget.allow("mallory", 1, now=0.0) for _ in range(21)].count(True) == 20
    assert budget.refused == {"mallory": 1}
    assert budget.allow("alice", 1, now=0.0)  # her own bucket
    assert not budget.allow("mallory", 1, now=0.05)  # half a token
    assert budget.allow("mallory", 1, now=0.2)  # a second token refilled
    assert [budget.allow("mallory", 1, now=100.0) for _ in range(25)].count(True) == 20


def test_bytes_are_charged_too() -> None:
    budget = IngressBudget(Settings(ingress_bytes_per_user=1000, ingress_burst_s=1))
    assert budget.allow("u", 600, now=0.0)
    assert not budget.allow("u", 600, now=0.0)
    assert budget.allow("u", 600, now=1.0)


def test_quiet_users_are_forgotten() -> None:
    budget = IngressBudget(Settings(ingress_rate_per_user=1))
    budget.allow("a", 1, now=0.0)
    budget.allow("b", 1, now=100.0)
    assert set(budget._buckets) == {"b"}
