"""The cold-start quota (`mesh.router.coldstart`): who contends, and 5 of every 100."""

from __future__ import annotations

import numpy as np
import pytest

from mesh.config import Settings
from mesh.router.coldstart import ColdStartQuota
from mesh.router.index import AgentStats, CapabilityIndex
from mesh.router.scoring import ScoreWeights, score

DIM = 8


def vec(*values: float) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[: len(values)] = values
    return (v / np.linalg.norm(v)).astype(np.float32)


def mesh_of(cosine: float, completed: int = 0) -> CapabilityIndex:
    """Established agent "old" on the query's axis, new agent "new" at `cosine` from it."""
    index = CapabilityIndex(DIM)
    old, new = vec(1, 0), vec(cosine, float(np.sqrt(1 - cosine**2)))
    index.add("old", old, old[None, :], stats=AgentStats(completed=100))
    index.add("new", new, new[None, :], stats=AgentStats(completed=completed))
    return index


class Counts:
    """A quota view kept by hand, recording as the selector does."""

    def __init__(self) -> None:
        self.table: dict[str, tuple[int, int]] = {}

    def counts(self, agent_id: str) -> tuple[int, int]:
        return self.table.get(agent_id, (0, 0))

    def record(self, contested: tuple[str, ...], chosen: str | None) -> None:
        for agent_id in contested:
            seen, given = self.counts(agent_id)
            self.table[agent_id] = (seen + 1, given + (agent_id == chosen))


def route(index: CapabilityIndex, weights: ScoreWeights, n: int, counts: Counts) -> list[str]:
    chosen = []
    for _ in range(n):
        decision = score(index, vec(1, 0), weights, quota=counts)
        counts.record(decision.contested, decision.agent_id)
        assert decision.agent_id is not None
        chosen.append(decision.agent_id)
    return chosen


@pytest.mark.parametrize(
    ("cosine", "threshold"),
    [(0.95, 0.5), (0.9, 0.92)],  # close above the threshold; just below it (0.90 < 0.92)
    ids=["above", "just-below"],
)
def test_a_close_new_agent_gets_5_of_every_100(cosine: float, threshold: float) -> None:
    weights = ScoreWeights.from_settings(Settings(), threshold=threshold)
    counts = Counts()
    chosen = route(mesh_of(cosine), weights, 200, counts)
    assert chosen.count("new") == 10  # 5 of every 100, spread out: 20th, 40th, 60th, ...
    assert [i for i, a in enumerate(chosen) if a == "new"][:3] == [19, 39, 59]
    assert counts.counts("new") == (200, 10)
    for start in range(0, 101):
        assert chosen[start : start + 100].count("new") >= 5


def test_who_does_not_contend() -> None:
    counts = Counts()
    # too far below the threshold (0.80 < 0.92 - 0.10)
    weights = ScoreWeights.from_settings(Settings(), threshold=0.92)
    assert set(route(mesh_of(0.8), weights, 50, counts)) == {"old"}
    # too far from the winner's total (margin 0.01)
    tight = ScoreWeights.from_settings(Settings(cold_start_margin=0.01), threshold=0.5)
    assert set(route(mesh_of(0.9), tight, 50, counts)) == {"old"}
    # warm: it completed its N tasks
    warm = ScoreWeights.from_settings(Settings(cold_start_completions=3), threshold=0.5)
    assert set(route(mesh_of(0.95, completed=3), warm, 50, counts)) == {"old"}
    # the quota turned off
    off = ScoreWeights.from_settings(Settings(cold_start_completions=0), threshold=0.5)
    assert set(route(mesh_of(0.95), off, 50, counts)) == {"old"}
    assert counts.table == {}


def test_a_cold_winner_counts_what_it_wins() -> None:
    index = CapabilityIndex(DIM)
    index.add("new", vec(1, 0), vec(1, 0)[None, :])
    weights = ScoreWeights.from_settings(Settings(), threshold=0.5)
    counts = Counts()
    assert set(route(index, weights, 30, counts)) == {"new"}
    assert counts.counts("new") == (30, 30)


def test_no_eligible_agent_no_quota() -> None:
    weights = ScoreWeights.from_settings(Settings(), threshold=0.99)
    index = mesh_of(0.95)
    index.set_stats("old", AgentStats(status="down"))
    decision = score(index, vec(1, 0), weights, quota=Counts())
    assert decision.agent_id is None and decision.contested == ()


def test_the_quota_counts_locally_until_flushed() -> None:
    quota = ColdStartQuota(None, None)  # type: ignore[arg-type]  # no flush here
    quota.record(("a", "b"), "a")
    quota.record(("a",), None)
    assert quota.counts("a") == (2, 1) and quota.counts("b") == (1, 0)
    assert quota.pending and quota.counts("c") == (0, 0)
