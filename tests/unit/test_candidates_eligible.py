"""A decision finds the best agent among those it may choose, however many others outrank them.

The index computes the similarity (what the threshold gates) for its best candidate rows
only (`CANDIDATE_ROWS`, and the first pass's rows past its size): an agent the request's
`required_tags`, a breaker or an exclusion leaves as the only choice must still be among
them, or a mesh of many similar agents answers "no match" when one of them fits.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from mesh.router.index import CANDIDATE_ROWS, CapabilityIndex, FitConfig
from mesh.router.scoring import ScoreWeights, score

DIM = 192
#: regional copies of one agent: near twins, told apart by a tag only
REGIONS = 150
W = ScoreWeights(threshold=0.5, exploration_share=0.0)


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def _twins(config: FitConfig) -> tuple[CapabilityIndex, np.ndarray]:
    rng = np.random.default_rng(7)
    base = _unit(rng.standard_normal(DIM))
    index = CapabilityIndex(DIM, fit=config)
    for i in range(REGIONS):
        noise = 0.3 * rng.standard_normal((4, DIM)) / np.sqrt(DIM)
        index.add(f"refunds-{i}", base, _unit(base + noise), tags={"region": f"r{i}"})
    index.refit()
    return index, _unit(base + 0.2 * rng.standard_normal(DIM) / np.sqrt(DIM))


CONFIGS = {
    "full pass": FitConfig(logprob_weight=0.0),
    "first pass": FitConfig(logprob_weight=0.0, first_pass_agents=100, first_pass_rows=30),
}


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_a_required_tag_finds_its_agent_among_near_twins(config: FitConfig) -> None:
    index, query = _twins(config)
    assert REGIONS > 2 * CANDIDATE_ROWS
    chosen = [
        score(index, query, W, required_tags={"region": f"r{i}"}).agent_id for i in range(REGIONS)
    ]
    assert chosen == [f"refunds-{i}" for i in range(REGIONS)]


@pytest.mark.parametrize("config", CONFIGS.values(), ids=CONFIGS.keys())
def test_agents_outranking_the_available_ones_do_not_hide_them(config: FitConfig) -> None:
    index, query = _twins(config)
    open_decision = score(index, query, W)
    assert open_decision.agent_id is not None
    # every agent but the lowest-ranked is unavailable (breakers open, excluded...)
    rank = index.rank(query)
    last = int(np.argmin(rank))
    blocked = np.ones(len(index), np.bool_)
    blocked[last] = False
    decision = score(index, query, W, blocked=blocked)
    assert decision.agent_id == index.ids[last]
    # the blocked agents keep their parts in the decision (explain shows why not them)
    best = {c.agent_id: c for c in decision.candidates()}[open_decision.agent_id]
    assert best.filtered == "unavailable" and best.similarity > W.threshold


def test_without_a_filter_the_candidates_are_the_best_rows() -> None:
    index, query = _twins(replace(CONFIGS["full pass"]))
    decision = score(index, query, W)
    similar = decision.similarity > -1
    assert similar.sum() == CANDIDATE_ROWS
