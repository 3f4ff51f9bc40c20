"""Embedder protocol, HashEmbedder and CachedEmbedder; nothing here loads a real model."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from mesh.config import Settings
from mesh.errors import NotStarted
from mesh.router.embedding import (
    CachedEmbedder,
    Embedder,
    FastEmbedder,
    HashEmbedder,
    Vectors,
    build_embedder,
    cached_vectors,
    length_chunks,
)


class CountingEmbedder:
    """Wraps a HashEmbedder and records every batch it is asked for."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(dim=32)
        self.calls: list[list[str]] = []

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def start(self) -> None:
        self.inner.start()

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls.append(list(texts))
        return self.inner.embed(texts)


def started(embedder: Embedder) -> Embedder:
    embedder.start()
    return embedder


def test_hash_embedder_is_deterministic_and_normalised() -> None:
    a = started(HashEmbedder(dim=64)).embed(["route me to billing", "账单在哪里", ""])
    b = started(HashEmbedder(dim=64)).embed(["route me to billing", "账单在哪里", ""])
    assert a.dtype == np.float32
    assert a.shape == (3, 64)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(np.linalg.norm(a, axis=1), 1.0, rtol=1e-6)


def test_hash_embedder_similar_texts_score_higher() -> None:
    vecs = started(HashEmbedder()).embed(
        ["reset my password", "please reset the password", "weather in Paris"]
    )
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


def test_hash_embedder_empty_batch() -> None:
    assert started(HashEmbedder(dim=16)).embed([]).shape == (0, 16)


def test_embed_before_start_raises() -> None:
    with pytest.raises(NotStarted):
        HashEmbedder().embed(["x"])
    with pytest.raises(NotStarted):
        FastEmbedder(cache_dir=Path("/nonexistent")).embed(["x"])


@pytest.mark.parametrize(
    "embedder",
    [HashEmbedder(), CachedEmbedder(HashEmbedder()), FastEmbedder(cache_dir=Path("/unused"))],
    ids=["hash", "cached", "fast"],
)
def test_protocol_conformance(embedder: Embedder) -> None:
    assert isinstance(embedder, Embedder)
    assert embedder.model_id
    assert embedder.dim > 0


def test_fast_embedder_does_nothing_at_construction(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    embedder = FastEmbedder(cache_dir=cache)
    assert embedder.model_id.startswith("usem3-onnx-v")
    assert embedder.dim == 512
    assert not cache.exists()


def test_fast_embedder_threads_and_spin_from_settings(tmp_path: Path) -> None:
    settings = Settings(model_cache_dir=tmp_path, embed_threads=2, embed_spin=True)
    custom = FastEmbedder.from_settings(settings)
    assert (custom.threads, custom.spin) == (2, True)
    override = FastEmbedder.from_settings(settings, threads=1, spin=False)
    assert (override.threads, override.spin) == (1, False)
    default = FastEmbedder.from_settings(Settings(model_cache_dir=tmp_path))
    assert (default.threads, default.spin) == (None, False)  # resolved at start()


def test_build_embedder_is_cached_and_lazy(tmp_path: Path) -> None:
    embedder = build_embedder(Settings(model_cache_dir=tmp_path / "cache"))
    assert isinstance(embedder, CachedEmbedder)
    assert embedder.model_id.startswith("usem3-onnx-v")
    assert not (tmp_path / "cache").exists()


def test_cache_hits_skip_the_inner_embedder() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, maxsize=10)
    cached.start()
    first = cached.embed(["a b", "c d"])
    again = cached.embed(["c d", "a b"])
    np.testing.assert_array_equal(first[::-1], again)
    assert inner.calls == [["a b", "c d"]]
    assert cached.stats.hits == 2
    assert cached.stats.misses == 2


def test_cache_batches_distinct_misses_once() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    cached.start()
    cached.embed(["x"])
    out = cached.embed(["x", "y", "z", "y"])
    assert inner.calls == [["x"], ["y", "z"]]
    np.testing.assert_array_equal(out[1], out[3])
    np.testing.assert_array_equal(out, inner.inner.embed(["x", "y", "z", "y"]))


def test_cache_evicts_least_recently_used() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner, maxsize=2)
    cached.start()
    cached.embed(["a"])
    cached.embed(["b"])
    cached.embed(["a"])  # a is now the most recent
    cached.embed(["c"])  # evicts b
    assert cached.stats.size == 2
    inner.calls.clear()
    cached.embed(["a", "b", "c"])
    assert inner.calls == [["b"]]


def test_cache_returns_copies() -> None:
    cached = CachedEmbedder(HashEmbedder(dim=16))
    cached.start()
    out = cached.embed(["same"])
    out[:] = 0
    assert np.linalg.norm(cached.embed(["same"])) == pytest.approx(1.0)


def test_cached_answers_only_when_every_text_is_held() -> None:
    inner = CountingEmbedder()
    cached = CachedEmbedder(inner)
    cached.start()
    assert cached_vectors(inner, ["a"]) is None  # not a cache: it must embed
    first = cached.embed(["a", "b"])
    assert cached.cached(["b", "c"]) is None  # c is missing: nothing counted
    assert cached.stats.hits == 0
    again = cached_vectors(cached, ["b", "a"])
    assert again is not None
    np.testing.assert_array_equal(again, first[::-1])
    assert cached.stats.hits == 2
    assert inner.calls == [["a", "b"]]
    again[:] = 0  # a copy
    np.testing.assert_array_equal(cached.embed(["a"])[0], first[0])


def test_length_chunks_group_similar_lengths_longest_first() -> None:
    lengths = np.array([3, 40, 4, 41, 3, 40, 5, 39], np.int64)
    chunks = length_chunks(lengths, limit=64, slack=8)
    assert [(sorted(rows.tolist()), width) for rows, width in chunks] == [
        ([1, 3, 5, 7], 41),
        ([0, 2, 4, 6], 5),
    ]


def test_length_chunks_cover_every_position_once_within_limit_and_slack() -> None:
    lengths = np.random.default_rng(0).integers(2, 60, 100).astype(np.int64)
    chunks = length_chunks(lengths, limit=16, slack=24)
    rows = np.concatenate([r for r, _ in chunks])
    assert sorted(rows.tolist()) == list(range(100))
    for r, width in chunks:
        assert 1 <= len(r) <= 16
        assert width == lengths[r].max()
        assert int((width - lengths[r]).sum()) <= 24
    same = length_chunks(np.array([7, 7, 7], np.int64), limit=2)
    assert [(r.tolist(), w) for r, w in same] == [([0, 1], 7), ([2], 7)]
    assert length_chunks(np.array([], np.int64), limit=2) == []
