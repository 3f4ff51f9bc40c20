"""Replacing an agent's profile releases what the old one held (rows, grams, tags, keywords):
an agent that changes its texts every few minutes must not grow a router's memory."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np

from mesh.router.index import CapabilityIndex
from mesh.router.lexical import grams

DIM = 32
ROUNDS = 100


def _profile(index: CapabilityIndex, rng: np.random.Generator, agent_id: str, n: int) -> None:
    """Register `agent_id` with texts, tags and keywords of round `n` (all new words)."""
    vecs = rng.normal(size=(4, DIM)).astype(np.float32)
    texts = [f"capability{n} alpha{n}", f"example{n} one", f"example{n} two", f"example{n} three"]
    index.add(
        agent_id,
        vecs[0],
        vecs[1:],
        tags={"team": f"t{n}", f"k{n}": "v"},
        keywords=[f"keyword{n}", f"two words{n}"],
        texts=texts,
    )


def _sizes(index: CapabilityIndex) -> dict[str, int]:
    rules = index._rules
    lexical = index._lexical
    return {
        "rows": len(index),
        "entries": len(index._entries),
        "row_map": len(index._rows),
        "grams": len(lexical._holders),
        "bags": len(lexical._bags),
        "bag_grams": sum(len(b) for b in lexical._bags if b is not None),
        "tags": len(rules._by_tag),
        "keywords": len(rules._by_keyword),
        "agent_keywords": len(rules._keywords),
        "raw_texts": sum(t is not None for t in index._raw_texts),
    }


def _two_agents(rng: np.random.Generator, changing: int) -> CapabilityIndex:
    index = CapabilityIndex(DIM, memory_size=8)
    _profile(index, rng, "steady", 0)
    _profile(index, rng, "changing", changing)
    for slot in range(3):  # learned texts are kept across a replacement, and stay bounded
        index.learn_at("changing", slot, rng.normal(size=DIM).astype(np.float32), f"asked {slot}")
    return index


def test_replacing_a_profile_many_times_keeps_the_index_bounded() -> None:
    rng = np.random.default_rng(7)
    index = _two_agents(rng, 1)

    gc.collect()
    tracemalloc.start()
    try:
        for n in range(2, 2 + ROUNDS // 2):
            _profile(index, rng, "changing", n)
        grams.cache_clear()  # a bounded LRU (65,536 texts), not the index's
        gc.collect()
        middle, _ = tracemalloc.get_traced_memory()
        for n in range(2 + ROUNDS // 2, 2 + ROUNDS):
            _profile(index, rng, "changing", n)
        grams.cache_clear()
        gc.collect()
        end, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    # every structure holds what the two current profiles need, as a fresh index does
    assert _sizes(index) == _sizes(_two_agents(rng, 1 + ROUNDS))
    assert index.entry("changing").learned_texts == {s: f"asked {s}" for s in range(3)}
    assert index.tag_mask({"team": "t1"}).sum() == 0
    assert index.tag_mask({"team": f"t{1 + ROUNDS}"}).tolist() == [False, True]
    assert index.keyword_hits("keyword1 please").sum() == 0
    assert index.keyword_hits(f"keyword{1 + ROUNDS} please").tolist() == [0.0, 1.0]
    # and the second half of the replacements allocated nothing that stays (a leak of
    # ~1 KiB a round would show as 50 KiB here)
    assert end - middle < 16 * 1024, (middle, end)
