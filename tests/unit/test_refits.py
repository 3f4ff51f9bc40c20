"""The refit budget, the choice of the fitting router and the ``route.fitted`` codec."""

from __future__ import annotations

import numpy as np

from mesh.router.fitting import FitConfig, fit_snapshot
from mesh.router.refits import FitBudget, FitLeader, FitParts, decode_fit, encode_fit, rounded


def test_budget_allows_a_fit_while_the_window_has_room() -> None:
    budget = FitBudget(0.1, window_s=60.0)  # 6 CPU-s a minute
    assert budget.allows(0.0, 2.0)
    budget.record(1.0, 2.0)
    assert budget.allows(2.0, 4.0)  # 2 + 4 <= 6
    budget.record(3.0, 2.0)
    assert budget.allows(4.0, 2.0)  # 4 + 2 <= 6
    assert not budget.allows(4.0, 4.0)  # no room left for a fit after this one
    budget.record(5.0, 2.0)
    assert not budget.allows(6.0, 0.5)
    assert budget.allows(61.5, 2.0)  # the first fit left the window
    assert budget.spent(61.5) == 4.0


def test_budget_lets_one_fit_through_when_a_fit_costs_more_than_the_window() -> None:
    budget = FitBudget(0.1, window_s=60.0)
    budget.record(1.0, 9.0)
    assert not budget.allows(30.0, 9.0)
    assert budget.allows(61.5, 9.0)


def test_a_router_defers_only_to_a_smaller_id_and_only_for_the_lease() -> None:
    leader = FitLeader("router-b")
    leader.heard("router-c", 0.0, 100.0)
    assert leader.fits_here(1.0)
    leader.heard("router-a", 0.0, 100.0)
    assert not leader.fits_here(99.0)
    assert leader.fits_here(100.0)


def test_a_fit_round_trips_and_installs_only_rows_whose_registration_agrees() -> None:
    rng = np.random.default_rng(1)
    dim = 16
    agents = {"a": 1, "b": 2, "c": 3}
    caps = [rng.normal(size=dim).astype(np.float32) for _ in agents]
    reqs = [rng.normal(size=(4, dim)).astype(np.float32) for _ in agents]
    cfg = FitConfig(steps=5, hidden=8, members=2)
    result = fit_snapshot(7, agents, caps, reqs, dim, cfg)
    assert result.head is not None
    parts = encode_fit(result, {"a": "da", "b": "db", "c": None}, rows_per_part=2)
    assert [p["part"] for p in parts] == [0, 1]
    assembler = FitParts()
    assert assembler.add("r1", parts[0]) is None
    whole = assembler.add("r1", parts[1])
    assert whole is not None
    local = {"a": ("da", 11), "b": ("other", 12), "c": ("dc", 13)}
    got = decode_fit(whole, 42, local)
    assert got.version == 42
    assert got.agents == {"a": 11, "b": -1, "c": -1}
    assert got.head is not None
    # the receiver installs exactly the head the fitter installs (`rounded`)
    same = rounded(result).head
    assert same is not None
    np.testing.assert_array_equal(got.head.weights, same.weights)
    np.testing.assert_array_equal(got.head.biases, same.biases)
    np.testing.assert_array_equal(got.head.hidden_weights, same.hidden_weights)
    np.testing.assert_array_equal(got.head.hidden_biases, same.hidden_biases)
    np.testing.assert_allclose(same.weights, result.head.weights, rtol=1e-3, atol=1e-4)
    np.testing.assert_array_equal(got.request_mean, result.request_mean)


def test_a_fit_missing_a_part_is_dropped_until_the_next_one() -> None:
    rng = np.random.default_rng(2)
    dim = 8
    agents = {"a": 1, "b": 2, "c": 3}
    caps = [rng.normal(size=dim).astype(np.float32) for _ in agents]
    reqs = [rng.normal(size=(2, dim)).astype(np.float32) for _ in agents]
    result = fit_snapshot(1, agents, caps, reqs, dim, FitConfig(steps=2, hidden=4, members=1))
    parts = encode_fit(result, {}, rows_per_part=1)
    assembler = FitParts()
    assert assembler.add("r1", parts[0]) is None
    assert assembler.add("r1", parts[2]) is None  # part 1 went missing
    for part in parts[:-1]:
        assert assembler.add("r1", part) is None
    whole = assembler.add("r1", parts[-1])
    assert whole is not None and [a for a, _ in whole["agents"]] == ["a", "b", "c"]


def test_a_skipped_fit_round_trips_without_a_head() -> None:
    dim = 4
    result = fit_snapshot(
        1, {"a": 1}, [np.ones(dim, np.float32)], [np.ones((2, dim), np.float32)], dim, FitConfig()
    )
    whole = FitParts().add("r1", encode_fit(result, {"a": "d"})[0])
    assert whole is not None
    got = decode_fit(whole, 0, {"a": ("d", 5)})
    assert got.head is None and got.agents == {"a": 5}
    np.testing.assert_array_equal(got.capability_mean, result.capability_mean)
