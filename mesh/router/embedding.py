"""Sentence embeddings for the semantic router, behind the `Embedder` protocol.

* `FastEmbedder`: USE-multilingual-v3 converted to ONNX (`mesh.router.usem_onnx`) and served by
  fastembed, or any other fastembed model named by ``Settings.embedding_model``.
* `HashEmbedder`: deterministic feature hashing, for fast unit tests only.
* `CachedEmbedder`: an LRU over texts in front of any embedder; misses go down as one batch.

Nothing loads at import or construction: `start()` does.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, Self, runtime_checkable

import numpy as np
from numpy.typing import NDArray

from mesh.errors import ConfigError, NotStarted

if TYPE_CHECKING:
    from fastembed import TextEmbedding

    from mesh.config import Settings

logger = logging.getLogger(__name__)

Vectors = NDArray[np.float32]

#: names of `Settings.embedding_model` that select the bundled, converted USE-m3
USEM3_NAMES = frozenset({"usem3", "use-m3", "usem3-onnx"})
#: ONNX session threads when none are given: measured on 2 cores (bench/embedding.py), 2 beat 1
#: for single queries (0.86 vs 0.95 ms p50) and batches (1,460 vs 1,100 texts/s); more threads
#: than that only add synchronisation for queries this small
MAX_DEFAULT_THREADS = 2

# custom fastembed models live in a class-level registry; two embedders may start at once
_REGISTER_LOCK = threading.Lock()


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into L2-normalised float32 rows. `start()` must run before `embed()`."""

    @property
    def model_id(self) -> str:
        """Stable id of the model and its version; part of embedding cache keys."""
        ...

    @property
    def dim(self) -> int:
        """Width of each vector."""
        ...

    def start(self) -> None:
        """Load the model; idempotent."""
        ...

    def embed(self, texts: Sequence[str]) -> Vectors:
        """Embed `texts` into a ``(len(texts), dim)`` float32 array of unit rows.

        Raises:
            NotStarted: `start()` has not run.
        """
        ...


def _normalise(rows: NDArray[np.floating]) -> Vectors:
    out = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return np.divide(out, np.maximum(norms, 1e-12), dtype=np.float32)  # type: ignore[no-any-return]


class FastEmbedder:
    """A fastembed `TextEmbedding`; ``model_name="usem3"`` serves the converted USE-m3.

    The converted model is loaded from ``<cache_dir>/usem3-onnx-v…`` with `specific_model_path`,
    so fastembed never asks a hub for it. Other names are fastembed's own models, downloaded
    into ``<cache_dir>/fastembed`` by fastembed on first `start()` (that needs a hub).
    """

    def __init__(
        self,
        model_name: str = "usem3",
        *,
        cache_dir: Path,
        threads: int | None = None,
        batch_size: int = 64,
    ) -> None:
        self._name = model_name
        self._cache_dir = cache_dir
        #: None: min(MAX_DEFAULT_THREADS, cpu count), resolved at start()
        self._threads = threads
        self._batch_size = batch_size
        self._model: TextEmbedding | None = None
        self._start_lock = threading.Lock()
        #: seconds spent in the last `start()` that loaded the model
        self.load_seconds: float | None = None

    @classmethod
    def from_settings(cls, settings: Settings, *, threads: int | None = None) -> Self:
        return cls(
            settings.embedding_model,
            cache_dir=settings.model_cache_dir,
            threads=threads,
            batch_size=settings.embed_batch_size,
        )

    @property
    def is_usem3(self) -> bool:
        return self._name.lower() in USEM3_NAMES

    @cached_property
    def model_id(self) -> str:
        if self.is_usem3:
            from mesh.router.usem_onnx import model_dir_name

            return model_dir_name()
        return f"fastembed-{metadata.version('fastembed')}/{self._name}"

    @cached_property
    def dim(self) -> int:
        if self.is_usem3:
            from mesh.router.usem_onnx import DIM

            return DIM
        from fastembed import TextEmbedding

        try:
            return TextEmbedding.get_embedding_size(self._name)
        except ValueError:
            raise self._unknown_model() from None

    def start(self) -> None:
        """Convert (first time only) and load the model, then run one warm-up query.

        Raises:
            ConfigError: the model name is unknown to fastembed, or the cache is unusable.
        """
        with self._start_lock:
            if self._model is not None:
                return
            started = time.perf_counter()
            if self._threads is None:
                self._threads = min(MAX_DEFAULT_THREADS, os.cpu_count() or 1)
            model = self._load()
            list(model.embed(["warm-up"], batch_size=1))  # first run allocates; keep it off queries
            self._model = model
            self.load_seconds = time.perf_counter() - started
        logger.info(
            "embedding model loaded model_id=%s dim=%d threads=%s in %.2fs",
            self.model_id,
            self.dim,
            self._threads,
            self.load_seconds,
        )

    def _load(self) -> TextEmbedding:
        from fastembed import TextEmbedding

        if not self.is_usem3:
            _ = self.dim  # fail on an unknown name before any download
            return TextEmbedding(
                self._name, cache_dir=str(self._cache_dir / "fastembed"), threads=self._threads
            )

        from fastembed.common.model_description import ModelSource, PoolingType

        from mesh.router.usem_onnx import MODEL_FILE, OUTPUT_NAME, ensure_usem3_model

        model_dir = ensure_usem3_model(self._cache_dir)
        name = f"agent-reach/{self.model_id}"
        with _REGISTER_LOCK:
            known = {m["model"].lower() for m in TextEmbedding.list_supported_models()}
            if name.lower() not in known:
                TextEmbedding.add_custom_model(
                    name,
                    pooling=PoolingType.DISABLED,  # the graph pools and normalises itself
                    normalization=True,
                    # never fetched: the model is always loaded with specific_model_path
                    sources=ModelSource(url=f"https://pypi.org/project/{self._package()}/"),
                    dim=self.dim,
                    model_file=MODEL_FILE,
                    description=f"USE multilingual v3, converted from {self._package()}",
                    license="apache-2.0",
                    output_name=OUTPUT_NAME,
                )
        return TextEmbedding(
            name,
            cache_dir=str(self._cache_dir),
            threads=self._threads,
            cuda=False,
            specific_model_path=str(model_dir),
        )

    @staticmethod
    def _package() -> str:
        from mesh.router.usem_onnx import PACKAGE

        return PACKAGE

    def _unknown_model(self) -> ConfigError:
        return ConfigError(
            f"embedding model {self._name!r} is neither 'usem3' nor a fastembed model; set "
            "MESH_EMBEDDING_MODEL (see TextEmbedding.list_supported_models())"
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        model = self._model
        if model is None:
            raise NotStarted(f"FastEmbedder({self._name!r}).embed() before start()")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        rows = list(model.embed(list(texts), batch_size=self._batch_size))
        return _normalise(np.stack(rows))


_WORD = re.compile(r"\w+")


class HashEmbedder:
    """Feature hashing of lower-cased words and character n-grams. For unit tests only.

    Deterministic across processes (blake2b, not `hash()`); texts sharing words or n-grams
    get a positive cosine, so ranking tests behave sensibly. Not a semantic model.
    """

    def __init__(self, dim: int = 256, *, ngram: int = 3) -> None:
        if dim < 8 or ngram < 1:
            raise ValueError(f"HashEmbedder needs dim >= 8 and ngram >= 1, got {dim}, {ngram}")
        self._dim = dim
        self._ngram = ngram
        self._started = False

    @property
    def model_id(self) -> str:
        return f"hash-v1-d{self._dim}-n{self._ngram}"

    @property
    def dim(self) -> int:
        return self._dim

    def start(self) -> None:
        self._started = True

    def _features(self, text: str) -> list[str]:
        words = _WORD.findall(text.lower())
        feats = [f"w:{w}" for w in words]
        for word in words:
            padded = f"<{word}>"
            n = min(self._ngram, len(padded))
            feats.extend(f"c:{padded[i : i + n]}" for i in range(len(padded) - n + 1))
        return feats or ["empty"]

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not self._started:
            raise NotStarted("HashEmbedder.embed() before start()")
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for feat in self._features(text):
                digest = hashlib.blake2b(feat.encode(), digest_size=8).digest()
                code = int.from_bytes(digest, "little")
                out[row, code % self._dim] += 1.0 if code >> 63 else -1.0
        return _normalise(out)


@dataclass(frozen=True)
class CacheStats:
    hits: int
    misses: int
    size: int


class CachedEmbedder:
    """LRU cache of vectors keyed by a hash of the text, in front of another `Embedder`.

    One `embed()` looks every text up, embeds the distinct misses in one call to the inner
    embedder (which batches them) and stores them. Thread-safe; the inner call runs unlocked.
    """

    def __init__(self, inner: Embedder, maxsize: int = 4096) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize must be >= 1, got {maxsize}")
        self.inner = inner
        self._maxsize = maxsize
        self._lru: OrderedDict[bytes, Vectors] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    def start(self) -> None:
        self.inner.start()

    @property
    def stats(self) -> CacheStats:
        with self._lock:
            return CacheStats(self._hits, self._misses, len(self._lru))

    def clear(self) -> None:
        with self._lock:
            self._lru.clear()

    @staticmethod
    def _key(text: str) -> bytes:
        return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()

    def embed(self, texts: Sequence[str]) -> Vectors:
        keys = [self._key(t) for t in texts]
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        pending: dict[bytes, list[int]] = {}
        miss_texts: list[str] = []
        with self._lock:
            for i, key in enumerate(keys):
                vec = self._lru.get(key)
                if vec is not None:
                    self._lru.move_to_end(key)
                    out[i] = vec
                    self._hits += 1
                    continue
                self._misses += 1
                if key not in pending:
                    pending[key] = []
                    miss_texts.append(texts[i])
                pending[key].append(i)
        if not miss_texts:
            return out
        fresh = self.inner.embed(miss_texts)
        with self._lock:
            for (key, rows), vec in zip(pending.items(), fresh, strict=True):
                out[rows] = vec
                stored = vec.copy()
                stored.flags.writeable = False
                self._lru[key] = stored
                self._lru.move_to_end(key)
            while len(self._lru) > self._maxsize:
                self._lru.popitem(last=False)
        return out


def build_embedder(settings: Settings, *, cache_size: int = 4096) -> Embedder:
    """The router's embedder for `settings`: a `CachedEmbedder` over a `FastEmbedder`.

    ``settings.embedding_model`` is ``"usem3"`` (the default, bundled, converted on first
    start) or a fastembed model name. Nothing is loaded until `start()`.
    """
    return CachedEmbedder(FastEmbedder.from_settings(settings), maxsize=cache_size)
