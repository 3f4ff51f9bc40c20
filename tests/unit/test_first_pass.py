"""The first pass over a large index (`mesh.router.firstpass`): it keeps the full pass's choice,
follows rows changed after the fit, and is off below its size."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from mesh.router.firstpass import FIRST_PASS_DIM, principal_basis
from mesh.router.index import CapabilityIndex, FitConfig
from mesh.router.scoring import ScoreWeights, score

DIM = 192
AGENTS = 300
#: small enough that a 300-agent index uses the first pass and keeps a tenth of its rows
CONFIG = FitConfig(first_pass_agents=200, first_pass_rows=30, logprob_weight=0.0)
WEIGHTS = ScoreWeights(threshold=0.0)


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def _noise(rng: np.random.Generator, size: float, *shape: int) -> np.ndarray:
    """Gaussian noise of length about `size` per row (beside unit vectors)."""
    return size * rng.standard_normal((*shape, DIM)) / np.sqrt(DIM)


def _agents(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    """Agent directions in 12 topics: texts live near a low-dimensional subspace, as
    sentence embeddings do, so a few principal directions carry most of them."""
    topics = rng.standard_normal((12, DIM))
    return [_unit(topics[i % 12] + 0.6 * rng.standard_normal(DIM)) for i in range(n)]


def _index(rng: np.random.Generator, config: FitConfig = CONFIG) -> tuple[CapabilityIndex, list]:
    index = CapabilityIndex(DIM, fit=config)
    bases = _agents(rng, AGENTS)
    for i, base in enumerate(bases):
        examples = _unit(base + _noise(rng, 0.3, 4))
        index.add(f"a{i}", base, examples)
    assert index.refit() is False  # no head: logprob_weight 0
    return index, bases


def _query(base: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return _unit(base + _noise(rng, 0.4))


def _uses_first_pass(index: CapabilityIndex, query: np.ndarray) -> bool:
    """Rows the first pass left out all get the same floor value: a full pass gives every
    row its own cosine."""
    rank = index.rank(query)
    return len(np.unique(rank)) < len(rank)


def test_principal_basis_is_orthonormal_and_keeps_the_texts() -> None:
    rng = np.random.default_rng(1)
    texts = _unit(rng.standard_normal((600, 40)) @ rng.standard_normal((40, DIM)))
    basis = principal_basis(texts, np.zeros(DIM, np.float32))
    assert basis is not None and basis.shape == (DIM, FIRST_PASS_DIM)
    np.testing.assert_allclose(basis.T @ basis, np.eye(FIRST_PASS_DIM), atol=1e-4)
    # texts spanning 40 directions keep their whole length in 128 principal ones
    np.testing.assert_allclose(np.linalg.norm(texts @ basis, axis=1), 1.0, atol=1e-3)
    # fewer texts than directions: their whole span is kept
    few = principal_basis(texts[:30], np.zeros(DIM, np.float32))
    assert few is not None
    np.testing.assert_allclose(np.linalg.norm(texts[:30] @ few, axis=1), 1.0, atol=1e-3)
    assert principal_basis(texts[:0], np.zeros(DIM, np.float32)) is None
    assert principal_basis(texts[:, :FIRST_PASS_DIM], np.zeros(FIRST_PASS_DIM)) is None


def test_the_first_pass_chooses_the_agent_the_full_pass_chooses() -> None:
    rng = np.random.default_rng(2)
    index, bases = _index(rng)
    full = replace(CONFIG, first_pass_agents=0)
    right = 0
    for i in rng.choice(AGENTS, 100, replace=False):
        query = _query(bases[int(i)], rng)
        assert _uses_first_pass(index, query)
        first = score(index, query, WEIGHTS).agent_id
        index.fit_config = full
        assert not _uses_first_pass(index, query)
        assert score(index, query, WEIGHTS).agent_id == first
        index.fit_config = CONFIG
        right += first == f"a{int(i)}"
    assert right >= 90  # and the choice is the right agent


def test_rows_changed_after_the_fit_are_found_by_the_first_pass() -> None:
    rng = np.random.default_rng(3)
    index, _ = _index(rng)
    # a new agent, registered after the fit, in a direction of its own
    new = _agents(np.random.default_rng(99), 1)[0]
    index.add("new", new, _unit(new + _noise(rng, 0.3, 4)))
    query = _query(new, rng)
    assert _uses_first_pass(index, query)
    assert score(index, query, WEIGHTS).agent_id == "new"
    # a removal moves the last row into the hole: the moved agent is still found
    index.remove("a0")
    assert index.row("new") == 0
    assert score(index, query, WEIGHTS).agent_id == "new"
    # an agent that learns texts of another topic is found there
    elsewhere = _unit(rng.standard_normal(DIM))
    for slot in range(40):
        index.learn_at("a7", slot, _unit(elsewhere + _noise(rng, 0.2)), None)
    assert score(index, _query(elsewhere, rng), WEIGHTS).agent_id == "a7"


def test_a_fit_without_a_basis_keeps_the_one_in_use() -> None:
    rng = np.random.default_rng(4)
    index, bases = _index(rng)
    query = _query(bases[5], rng)
    # a fit received from another router carries no basis
    peer = replace(index.fit_directions(), basis=None)
    index.apply_fit(peer)
    assert _uses_first_pass(index, query)
    assert score(index, query, WEIGHTS).agent_id == "a5"


def test_no_first_pass_below_its_size() -> None:
    rng = np.random.default_rng(5)
    index, bases = _index(rng, replace(CONFIG, first_pass_agents=AGENTS + 1))
    query = _query(bases[3], rng)
    assert not _uses_first_pass(index, query)
    assert index.fit_directions().basis is None
    assert score(index, query, WEIGHTS).agent_id == "a3"
