"""bench/load.py: a configuration measured more than once (``--access off,on,off,on``) is
reported once, over all of its closed-loop runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.load import Closed, access_costs, merged_closed


def _closed(config: str, rates: list[float], mode: str = "semantic") -> Closed:
    runs: list[Any] = [SimpleNamespace(completed_per_s=r) for r in rates]
    return Closed(config, "mesh", 100, 1, mode, runs, sorted(rates)[len(rates) // 2],
                  min(rates), max(rates))  # fmt: skip


def test_alternating_meshes_pool_their_runs_in_first_seen_order() -> None:
    closed = [
        _closed("mesh n100 r1 ac-off", [200.0, 210.0, 190.0]),
        _closed("mesh n100 r1 ac-on", [150.0, 160.0, 155.0]),
        _closed("mesh n100 r1 ac-off", [230.0, 220.0, 240.0]),
        _closed("mesh n100 r1 ac-on", [215.0, 205.0, 225.0]),
        _closed("mesh n100 r1 ac-on", [100.0], mode="target"),
    ]
    pooled = merged_closed(closed)
    assert [(c.config, c.mode) for c in pooled] == [
        ("mesh n100 r1 ac-off", "semantic"),
        ("mesh n100 r1 ac-on", "semantic"),
        ("mesh n100 r1 ac-on", "target"),
    ]
    off, on = pooled[0], pooled[1]
    assert len(off.runs) == 6 and (off.median_per_s, off.min_per_s, off.max_per_s) == (
        215.0,
        190.0,
        240.0,
    )
    assert len(on.runs) == 6 and on.median_per_s == 182.5
    assert len(closed[0].runs) == 3  # the inputs keep their own runs
    outcome = SimpleNamespace(closed=pooled)
    assert access_costs(outcome)[("mesh n100 r1", "semantic")] == (on, off)  # type: ignore[arg-type]


def test_a_configuration_measured_once_is_unchanged() -> None:
    one = _closed("mesh n100 r1", [180.0, 170.0, 175.0])
    (pooled,) = merged_closed([one])
    assert pooled == one
