"""CapabilityIndex: rows, removal, tags, keywords, the bounded reservoir and refit."""

from __future__ import annotations

import numpy as np
import pytest

from mesh.router.index import AgentStats, CapabilityIndex, FitConfig

DIM = 16


def unit(*hot: int, noise: float = 0.0, seed: int = 0) -> np.ndarray:
    v = np.zeros(DIM, np.float32)
    v[list(hot)] = 1.0
    v += noise * np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


def add(index: CapabilityIndex, agent_id: str, axis: int, **kw: object) -> None:
    examples = np.stack([unit(axis, noise=0.2, seed=s) for s in range(3)])
    index.add(agent_id, unit(axis), examples, **kw)  # type: ignore[arg-type]


def test_add_replace_remove_keeps_rows_consistent() -> None:
    index = CapabilityIndex(DIM)
    for i in range(20):  # past the initial capacity
        add(index, f"a{i}", i % DIM)
    assert len(index) == 20 and index.prototypes.shape == (20, DIM)
    assert index.remove("a3") and not index.remove("a3")
    assert "a3" not in index and len(index) == 19
    row = index.row("a19")  # the last agent moved into the hole
    assert row == 3
    np.testing.assert_allclose(index.prototypes[row] @ unit(19 % DIM), 1.0, atol=0.1)
    add(index, "a5", 7)  # replace: same row, new vectors
    assert index.prototypes[index.row("a5")] @ unit(7) > 0.9
    assert index.ids == tuple(index.entry(a).agent_id for a in index.ids)


def test_prototypes_are_unit_rows() -> None:
    index = CapabilityIndex(DIM)
    for i in range(4):
        add(index, f"a{i}", i)
    index.refit()
    np.testing.assert_allclose(np.linalg.norm(index.prototypes, axis=1), 1.0, rtol=1e-5)


def test_tag_mask_and_keywords() -> None:
    index = CapabilityIndex(DIM)
    add(index, "eu", 0, tags={"region": "eu", "tier": "gold"}, keywords=["invoice", "VAT id"])
    add(index, "us", 1, tags={"region": "us"})
    assert index.tag_mask({"region": "eu"}).tolist() == [True, False]
    assert index.tag_mask({"region": "eu", "tier": "silver"}).tolist() == [False, False]
    assert index.tag_mask({}).tolist() == [True, True]
    assert index.keyword_hits("Send the INVOICE please").tolist() == [1.0, 0.0]
    assert index.keyword_hits("what is my vat id?").tolist() == [1.0, 0.0]
    assert index.keyword_hits("vat rules").tolist() == [0.0, 0.0]
    index.remove("eu")
    assert index.keyword_hits("invoice").tolist() == [0.0]


def test_reservoir_is_bounded_and_deterministic() -> None:
    def run() -> list[np.ndarray]:
        index = CapabilityIndex(DIM, memory_size=5, seed=42)
        add(index, "a", 0)
        for s in range(40):
            index.learn("a", unit(1, noise=0.5, seed=s), good=True)
        index.learn("a", unit(2), good=False)
        index.learn("ghost", unit(2), good=True)  # unknown agent: ignored
        entry = index.entry("a")
        assert len(entry.learned) == 5 and entry.learned_seen == 40 and entry.bad == 1
        return [entry.learned[s] for s in sorted(entry.learned)]

    first, second = run(), run()
    assert all(np.array_equal(x, y) for x, y in zip(first, second, strict=True))


def test_learning_moves_the_prototype() -> None:
    index = CapabilityIndex(DIM)
    add(index, "a", 0)
    add(index, "b", 5)
    before = float(index.prototypes[0] @ unit(3))
    for s in range(10):
        index.learn("a", unit(3, noise=0.1, seed=s), good=True)
    assert float(index.prototypes[0] @ unit(3)) > before
    assert index.dirty


def test_refit_separates_overlapping_agents() -> None:
    index = CapabilityIndex(DIM, fit=FitConfig(steps=200))
    index.add("a", unit(0, 1), np.stack([unit(0, 1, noise=0.05, seed=s) for s in range(4)]))
    index.add("b", unit(0, 2), np.stack([unit(0, 2, noise=0.05, seed=s) for s in range(4)]))
    index.add("c", unit(3), np.stack([unit(3, noise=0.05, seed=s) for s in range(4)]))
    q = unit(0, 1, noise=0.05, seed=9)
    before = index.rank(q)
    assert index.refit() and not index.dirty and index.fitted
    after = index.rank(q)
    assert int(np.argmax(after)) == 0
    # the similarity never exceeds the centroid cosine: the threshold stays a cosine cut
    cos = index.prototypes @ index.center_query(q)
    assert np.all(after <= cos + 1e-6) and before.shape == after.shape


def test_fit_in_two_steps_keeps_learners_and_abstains_on_new_registrations() -> None:
    index = CapabilityIndex(DIM)
    for i in range(4):
        add(index, f"a{i}", i)
    result = index.fit_directions()
    assert result.fitted and set(result.agents) == {"a0", "a1", "a2", "a3"}
    index.learn("a1", unit(5), good=True)  # learned after the snapshot: still a1
    index.remove("a2")
    add(index, "a2", 7)  # removed and re-added: a new registration, never the old head
    add(index, "a3", 6)  # re-registered with other texts
    assert index.apply_fit(result) and index.dirty
    fitted = {a: bool(index._head.fitted[index.row(a)]) for a in index.ids}
    assert fitted == {"a0": True, "a1": True, "a2": False, "a3": False}
    # the head has no opinion on an agent it has not seen: it gets the leader's term
    q = unit(7, noise=0.05, seed=3)
    head_term = index.rank(q) - index.prototypes @ index.center_query(q)
    known = [index.row(a) for a in ("a0", "a1")]
    assert np.all(head_term <= 1e-6)
    assert head_term[index.row("a2")] == pytest.approx(head_term[known].max(), abs=1e-6)
    assert index.refit() and not index.dirty
    assert index._head.fitted[: len(index)].all()


def test_set_memory_replaces_the_reservoir() -> None:
    index = CapabilityIndex(DIM, memory_size=3)
    add(index, "a", 0)
    add(index, "b", 5)
    index.refit()
    before = float(index.rank(unit(3))[0])
    vectors = np.stack([unit(3, noise=0.1, seed=s) for s in range(5)])
    index.set_memory("a", vectors, seen=12, bad=2)
    entry = index.entry("a")
    assert len(entry.learned) == 3 and entry.learned_seen == 12 and entry.bad == 2
    np.testing.assert_array_equal(entry.learned[2], vectors[-1])
    assert index.dirty and float(index.rank(unit(3))[0]) > before
    index.set_memory("ghost", vectors, seen=1, bad=0)  # unknown agent: ignored


def test_refit_skips_when_too_large_and_stats_roundtrip() -> None:
    index = CapabilityIndex(DIM, fit=FitConfig(max_cells=1))
    add(index, "a", 0, stats=AgentStats(load=2, max_concurrency=4, status="draining"))
    add(index, "b", 1)
    assert not index.refit()
    assert index.stats("a").load == 2 and not index.routable[0]
    with pytest.raises(KeyError):
        index.stats("nope")


def test_lexical_channel_scale_and_wiring() -> None:
    index = CapabilityIndex(DIM, memory_size=2, fit=FitConfig(lexical_weight=0.4))
    add(index, "a", 0)
    add(index, "b", 1)
    q = unit(0, 1)
    # no texts: the channel is off and the similarity is the dense part
    np.testing.assert_array_equal(index.rank(q, "freeze my card"), index.rank(q))
    add(index, "a", 0, texts=["Handles card requests.", "freeze my card"])
    add(index, "b", 1, texts=["Handles currency requests.", "convert my dollars"])
    index.refit()
    no_text = index.rank(q)
    fused = index.rank(q, "please freeze my card")
    assert int(np.argmax(fused)) == 0 and np.all(fused <= 1.0 + 1e-6)
    # without a query text the coverage is 0; "freeze" and "card" are a's words only
    assert np.all(fused >= no_text) and fused[0] - no_text[0] > fused[1] - no_text[1]
    off = CapabilityIndex(DIM, fit=FitConfig(lexical_weight=0.0))
    for agent_id, axis in (("a", 0), ("b", 1)):
        add(off, agent_id, axis, texts=["anything"])
    off.refit()
    np.testing.assert_allclose(no_text, 0.6 * off.rank(q, "x"), atol=1e-5)
    # learned texts enter and, once replaced in the bounded reservoir, leave
    for s in range(12):
        index.learn("b", unit(1, noise=0.1, seed=s), good=True, text=f"wire transfer {s}")
    entry = index.entry("b")
    assert len(entry.learned_texts) == 2 and entry.learned_seen == 12
    kept = [t for t in entry.learned_texts.values() if t is not None]
    lex_b = index._lex_slots[index.row("b")]
    gone = next(f"wire transfer {s}" for s in range(12) if f"wire transfer {s}" not in kept)
    assert index._lexical.coverage(kept[0], np.array([lex_b]))[0] == pytest.approx(1.0)
    assert index._lexical.coverage(gone, np.array([lex_b]))[0] < 1.0
    # replacing the registration keeps the learned texts, drops the old registration texts
    add(index, "b", 1, texts=["Handles crypto requests."])
    assert index.entry("b").learned_texts == entry.learned_texts
    assert index._lexical.coverage("currency", np.array([lex_b]))[0] == 0.0
    index.set_memory("b", np.stack([unit(1)]), seen=3, bad=0, texts=["swift code"])
    assert index._lexical.coverage(kept[0], np.array([lex_b]))[0] < 1.0
    with pytest.raises(ValueError, match="texts"):
        index.set_memory("b", np.stack([unit(1)]), seen=3, bad=0, texts=[])
    assert index.remove("b") and index._lex_texts == 2  # only a's registration texts left


def test_learning_one_text_touches_its_own_grams_and_one_row() -> None:
    from mesh.router.lexical import grams

    index = CapabilityIndex(DIM, memory_size=3)
    for i in range(50):
        add(index, f"a{i}", i % 8, texts=[f"Handles topic {i}.", f"please help with {i}"])
    lexical = index._lexical
    rows, postings = index.rows_refreshed, lexical.postings_changed
    text = "my parcel never arrived"
    assert index.learn_at("a7", 1, unit(3), text, seen=1)
    assert index.rows_refreshed - rows == 1
    assert lexical.postings_changed - postings == len(grams(text))
    assert index.entry("a7").learned_texts == {1: text}
    # replacing the slot removes the old text's grams and adds the new one's
    rows, postings = index.rows_refreshed, lexical.postings_changed
    other = "refund please"
    assert index.learn_at("a7", 1, unit(4), other)
    assert index.rows_refreshed - rows == 1
    assert lexical.postings_changed - postings == len(grams(text)) + len(grams(other))
    assert index.entry("a7").learned_texts == {1: other}
    assert not index.learn_at("ghost", 0, unit(1), "x")
    assert not index.learn_at("a7", 3, unit(1), "x")  # outside the reservoir


def test_incremental_row_updates_match_a_full_recompute() -> None:
    index = CapabilityIndex(DIM, memory_size=4)
    add(index, "a", 0)
    add(index, "b", 3)
    index.refit()  # genre means are non-zero from here on
    for s in range(11):
        index.learn_at("a", s % 4, unit(s % 7, noise=0.3, seed=s), f"text {s}")
    row = index.row("a")
    centroid, raw = index.prototypes[row].copy(), index._raw[row].copy()
    texts = index._raw_texts[row].copy()  # type: ignore[union-attr]
    index._refresh_row(row)
    np.testing.assert_allclose(index.prototypes[row], centroid, atol=1e-5)
    np.testing.assert_allclose(index._raw[row], raw, atol=1e-5)
    np.testing.assert_allclose(index._raw_texts[row], texts, atol=1e-6)  # type: ignore[arg-type]


def test_learned_texts_follow_a_moved_row() -> None:
    index = CapabilityIndex(DIM, memory_size=6)
    for name, axis in (("a", 0), ("b", 3), ("c", 5)):
        add(index, name, axis)
    index.refit()
    for s in range(9):  # appends into the room, then replaces in place
        index.learn_at("c", s % 6, unit(s % 7, noise=0.3, seed=s), f"text {s}")
    index.remove("a")  # the last row, c's, moves into a's
    index.learn_at("c", 6 % 6, unit(2, noise=0.3, seed=99), "after the move")
    row = index.row("c")
    texts = index._raw_texts[row].copy()  # type: ignore[union-attr]
    centroid = index.prototypes[row].copy()
    index._refresh_row(row)
    np.testing.assert_allclose(index._raw_texts[row], texts, atol=1e-6)  # type: ignore[arg-type]
    np.testing.assert_allclose(index.prototypes[row], centroid, atol=1e-5)
    assert len(texts) == len(index.entry("c").examples) + 6


def test_a_dispatch_counts_one_more_task_in_flight() -> None:
    index = CapabilityIndex(DIM)
    before = AgentStats(load=2, max_concurrency=4, success_rate=0.75, idle_s=30.0, completed=7)
    add(index, "a", 0, stats=before)
    version = index.stats_version
    index.count_dispatch("a")
    index.count_dispatch("ghost")  # unknown: nothing
    assert index.stats("a") == AgentStats(
        load=3, max_concurrency=4, success_rate=0.75, idle_s=0.0, completed=7
    )
    assert index.stats_version != version  # what is derived from the stats is stale
