"""scoring.score: parts, threshold, filters, tie arbitration and exploration."""

from __future__ import annotations

import numpy as np

from mesh.config import Settings
from mesh.router.index import AgentStats, CapabilityIndex
from mesh.router.scoring import ScoreWeights, score

DIM = 8


def vec(*values: float) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[: len(values)] = values
    return (v / np.linalg.norm(v)).astype(np.float32)


def make(**stats: AgentStats) -> CapabilityIndex:
    index = CapabilityIndex(DIM)
    axes = {"a": vec(1, 0), "b": vec(0.8, 0.6), "c": vec(0, 0, 1)}
    for name, axis in axes.items():
        index.add(name, axis, axis[None, :], tags={"zone": name}, stats=stats.get(name))
    return index


W = ScoreWeights(threshold=0.5, exploration_share=0.0)


def test_best_similarity_wins_and_parts_add_up() -> None:
    decision = score(make(), vec(1, 0), W)
    assert decision.agent_id == "a"
    ranked = decision.candidates()
    assert [c.agent_id for c in ranked][:2] == ["a", "b"]
    for c in ranked:
        parts = c.semantic + c.keyword + c.load + c.idle + c.history + c.priority
        assert abs(parts - c.total) < 1e-5
    assert ranked[-1].agent_id == "c" and ranked[-1].filtered == "below_threshold"
    assert decision.candidates(1)[0].as_dict()["agent_id"] == "a"


def test_nothing_clears_threshold() -> None:
    decision = score(make(), vec(0, 0, 0, 1), W)
    assert decision.agent_id is None and decision.strategy == "none"
    assert len(decision.bid_candidates(2)) == 2
    assert decision.best_similarity() < 0.5


def test_filters_status_and_tags() -> None:
    index = make(a=AgentStats(status="down"))
    decision = score(index, vec(1, 0), W)
    assert decision.agent_id == "b"
    assert decision.candidate(index.row("a")).filtered == "unavailable"
    decision = score(index, vec(1, 0), W, required_tags={"zone": "c"})
    assert decision.agent_id is None
    assert decision.candidate(index.row("b")).filtered == "tags"


def test_routable_rows_replace_the_live_ones() -> None:
    """The selector's second pass: only the agents awaited (down, restarting) may win."""
    index = make(a=AgentStats(status="down"))
    awaited = np.zeros(len(index), np.bool_)
    awaited[index.row("a")] = True
    decision = score(index, vec(1, 0), W, routable=awaited)
    assert decision.agent_id == "a"
    assert decision.candidate(index.row("b")).filtered == "unavailable"
    blocked = awaited.copy()
    assert score(index, vec(1, 0), W, routable=awaited, blocked=blocked).agent_id is None


def test_keyword_boost_can_lift_over_threshold() -> None:
    index = CapabilityIndex(DIM)
    index.add("k", vec(0, 1), vec(0, 1)[None, :], keywords=["refund"])
    q = vec(0.6, 0.8 * 0.55, 0.5)  # similarity below 0.5
    assert score(index, q, W).agent_id is None
    decision = score(index, q, W, query_text="I want a refund")
    assert decision.agent_id == "k" and decision.keyword[0] == W.keyword_boost


def test_load_outweighs_small_similarity_gap_but_tie_arbitrates_by_similarity() -> None:
    # a is more similar but busy; totals land within the tie margin: similarity decides
    index = make(a=AgentStats(load=1, max_concurrency=4))
    decision = score(index, vec(1, 0.2), W)
    assert decision.strategy == "arbitrated"
    assert decision.agent_id == "a" and decision.runner_up == "b"
    # a fully loaded: no tie any more, b wins on total
    index.set_stats("a", AgentStats(load=4, max_concurrency=4, idle_s=0))
    assert score(index, vec(1, 0.2), W).agent_id == "b"


def test_equal_similarity_arbitrates_by_load_then_success() -> None:
    index = CapabilityIndex(DIM)
    for name in ("x", "y"):
        index.add(name, vec(1, 0), vec(1, 0)[None, :])
    index.set_stats("x", AgentStats(load=1, max_concurrency=100, idle_s=1e9))
    assert score(index, vec(1, 0), W).agent_id == "y"
    index.set_stats("x", AgentStats(success_rate=1.0))
    index.set_stats("y", AgentStats(success_rate=0.5))
    assert score(index, vec(1, 0), W).agent_id == "x"


def test_a_cold_agent_close_to_the_winner_gets_its_quota() -> None:
    index = make(a=AgentStats(completed=100), b=AgentStats(completed=0))
    settings = Settings(exploration_share=0.5, cold_start_margin=0.2)
    weights = ScoreWeights.from_settings(settings, threshold=0.5)
    counts: dict[str, tuple[int, int]] = {}

    class Quota:
        def counts(self, agent_id: str) -> tuple[int, int]:
            return counts.get(agent_id, (0, 0))

    first = score(index, vec(1, 0), weights, quota=Quota())
    assert first.agent_id == "a" and first.contested == ("b",)
    counts["b"] = (1, 0)  # half of the tasks it was close on: the second is b's
    explored = score(index, vec(1, 0), weights, quota=Quota())
    assert explored.agent_id == "b" and explored.strategy == "explore"
    assert explored.runner_up == "a" and explored.contested == ("b",)
    counts["b"] = (2, 1)
    assert score(index, vec(1, 0), weights, quota=Quota()).agent_id == "a"
    # without a quota (explain, multi-intent detection) nobody is explored
    assert score(index, vec(1, 0), weights).contested == ()


def test_empty_index() -> None:
    decision = score(CapabilityIndex(DIM), vec(1), W)
    assert decision.agent_id is None and decision.candidates() == []


def test_query_text_reaches_the_lexical_channel() -> None:
    index = CapabilityIndex(DIM)
    same = vec(1, 0)
    index.add("cards", same, same[None, :], texts=["block my credit card"])
    index.add("fx", same, same[None, :], texts=["exchange my dollars"])
    assert score(index, same, W).semantic[0] == score(index, same, W).semantic[1]
    decision = score(index, same, W, query_text="please block the card")
    # words shared with an agent's texts raise its rank, not its absolute similarity
    assert decision.agent_id == "cards" and decision.semantic[0] > decision.semantic[1]
    assert decision.similarity[0] == decision.similarity[1]


def test_absolute_similarity_does_not_depend_on_the_other_agents() -> None:
    """The threshold's scale is the agent's own: adding agents or fitting leaves it alone."""
    rng = np.random.default_rng(3)
    base = rng.normal(size=(6, DIM)).astype(np.float32)
    base /= np.linalg.norm(base, axis=1, keepdims=True)
    query = (base[0] + 0.3 * base[1]).astype(np.float32)
    query /= np.linalg.norm(query)
    small = CapabilityIndex(DIM)
    small.add("a", base[0], base[1:3])
    small.add("b", base[3], base[4:6])
    alone = score(small, query, W).similarity[0]
    big = CapabilityIndex(DIM)
    big.add("a", base[0], base[1:3])
    big.add("b", base[3], base[4:6])
    for i in range(30):
        v = rng.normal(size=(3, DIM)).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        big.add(f"other-{i}", v[0], v[1:])
    big.refit()
    row = big.row("a")
    assert abs(float(score(big, query, W).similarity[row]) - float(alone)) < 1e-5
