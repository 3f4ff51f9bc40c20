"""Sentence embeddings for the semantic router, behind the `Embedder` protocol.

* `FastEmbedder`: USE-multilingual-v3 converted to ONNX (`mesh.router.usem_onnx`) and loaded by
  fastembed, or any other fastembed model named by ``Settings.embedding_model``. USE-m3 texts
  run in chunks of similar token counts (`length_chunks`), each cut to its longest text.
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
    import onnxruntime as ort
    from fastembed import TextEmbedding
    from tokenizers import Tokenizer

    from mesh.config import Settings

logger = logging.getLogger(__name__)

Vectors = NDArray[np.float32]

#: names of `Settings.embedding_model` that select the bundled, converted USE-m3
USEM3_NAMES = frozenset({"usem3", "use-m3", "usem3-onnx"})
#: USE-m3 with its precision chosen (the names above: int8 where the CPU has 8-bit dot
#: products, `mesh.router.usem_onnx.int8_by_default`)
USEM3_PRECISIONS = {"usem3-int8": True, "usem3-fp32": False}
#: ONNX intra-op threads when none are given (``Settings.embed_threads`` unset). Measured on
#: 2 cores, ``python -m bench.embedding --threads 1,2 --spin 0,1 -r 3``, medians of 3 runs:
#: 1 thread costs the least CPU per text (batch 1/8/32/64: 1.28/0.68/0.70/0.76 ms vs
#: 1.78/1.04/0.96/0.89 ms with 2 threads), and single-query latency is the same within noise
#: (p50 1.23 vs 1.18 ms, p99 1.59 vs 1.46 ms). 2 threads buy throughput only for big batches on
#: an otherwise idle machine (batch 64: 1,830 vs 1,340 texts/s); the router shares its 2 cores
#: with RabbitMQ, Redis and workers, so CPU per text wins. With spinning on, 2 threads also burn
#: 1.03 cores busy-waiting in the gaps between queries sent every 10 ms (0.00 without).
MAX_DEFAULT_THREADS = 1
#: USE-m3 texts of one `embed()` run in chunks of similar token counts, longest first (the
#: graph costs per padded token, plus ~0.6 ms a run; a padded token ~0.027 ms): a chunk ends
#: where the padding it would carry passes this many tokens, about one run's cost. Measured
#: on the load bench's texts, CPU ms per text by batch (one run padded to the longest /
#: chunked): 8: 0.506 / 0.517, 16: 0.583 / 0.487, 24: 0.584 / 0.459, 32: 0.667 / 0.452.
CHUNK_PADDING_TOKENS = 24
#: texts tokenised at once by `FastEmbedder.embed` (bounds the padded id matrix)
TOKENIZE_SLICE = 256
#: the environment variable with which the tokenizers library tokenises a batch on its own
#: thread pool ("true", its default when unset) or on the calling thread ("false")
TOKENIZERS_PARALLELISM = "TOKENIZERS_PARALLELISM"

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
    so fastembed never asks a hub for it; `embed()` then feeds fastembed's tokenizer and session
    itself, in `length_chunks` (fastembed pads a whole batch to its longest text). Other names
    are fastembed's own models, downloaded into ``<cache_dir>/fastembed`` by fastembed on first
    `start()` (that needs a hub).
    """

    def __init__(
        self,
        model_name: str = "usem3",
        *,
        cache_dir: Path,
        threads: int | None = None,
        spin: bool = False,
        batch_size: int = 64,
    ) -> None:
        if threads is not None and threads < 1:
            raise ValueError(f"threads must be >= 1, got {threads}")
        self._name = model_name
        self._cache_dir = cache_dir
        #: None: min(MAX_DEFAULT_THREADS, cpu count), resolved at start()
        self._threads = threads
        #: let idle ONNX Runtime pool threads busy-wait for the next query
        self._spin = spin
        self._batch_size = batch_size
        self._model: TextEmbedding | None = None
        #: USE-m3: the tokenizer and session `embed()` runs itself (None: fastembed's embed)
        self._direct: tuple[Tokenizer, ort.InferenceSession] | None = None
        self._start_lock = threading.Lock()
        #: seconds spent in the last `start()` that loaded the model
        self.load_seconds: float | None = None

    @classmethod
    def from_settings(
        cls, settings: Settings, *, threads: int | None = None, spin: bool | None = None
    ) -> Self:
        """`threads` / `spin` override ``settings.embed_threads`` / ``settings.embed_spin``."""
        return cls(
            settings.embedding_model,
            cache_dir=settings.model_cache_dir,
            threads=settings.embed_threads if threads is None else threads,
            spin=settings.embed_spin if spin is None else spin,
            batch_size=settings.embed_batch_size,
        )

    @property
    def threads(self) -> int | None:
        """ONNX Runtime intra-op threads; None until `start()` resolves the default."""
        return self._threads

    @property
    def spin(self) -> bool:
        return self._spin

    @property
    def session(self) -> ort.InferenceSession:
        """The loaded ONNX Runtime session (for inspection).

        Raises:
            NotStarted: `start()` has not run.
        """
        if self._model is None:
            raise NotStarted(f"FastEmbedder({self._name!r}).session before start()")
        return _session_of(self._model)

    @property
    def is_usem3(self) -> bool:
        name = self._name.lower()
        return name in USEM3_NAMES or name in USEM3_PRECISIONS

    @cached_property
    def int8(self) -> bool:
        """USE-m3 only: runs the int8 model (one text a run: its inputs are quantised per
        tensor, so a batch would change each text's vector)."""
        from mesh.router.usem_onnx import int8_by_default

        chosen = USEM3_PRECISIONS.get(self._name.lower())
        return int8_by_default() if chosen is None else chosen

    @cached_property
    def model_id(self) -> str:
        if self.is_usem3:
            from mesh.router.usem_onnx import model_dir_name

            return model_dir_name(int8=self.int8)
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
            serial_tokenizer()
            model = self._load()
            _rebuild_session(model, threads=self._threads, spin=self._spin)
            if self.is_usem3:
                self._direct = (_tokenizer_of(model), _session_of(model))
            list(model.embed(["warm-up"], batch_size=1))  # first run allocates; keep it off queries
            self._model = model
            self.load_seconds = time.perf_counter() - started
        logger.info(
            "embedding model loaded model_id=%s dim=%d threads=%s spinning=%s in %.2fs",
            self.model_id,
            self.dim,
            self._threads,
            "on" if self._spin else "off",
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

        model_dir = ensure_usem3_model(self._cache_dir, int8=self.int8)
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
            f"embedding model {self._name!r} is neither 'usem3' ('usem3-int8', 'usem3-fp32') "
            "nor a fastembed model; set MESH_EMBEDDING_MODEL (see "
            "TextEmbedding.list_supported_models())"
        )

    def embed(self, texts: Sequence[str]) -> Vectors:
        model = self._model
        if model is None:
            raise NotStarted(f"FastEmbedder({self._name!r}).embed() before start()")
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        if self._direct is not None:
            return _normalise(self._run_chunked(list(texts), *self._direct))
        rows = list(model.embed(list(texts), batch_size=self._batch_size))
        return _normalise(np.stack(rows))

    def _run_chunked(
        self, texts: list[str], tokenizer: Tokenizer, session: ort.InferenceSession
    ) -> Vectors:
        """USE-m3 (our own graph: ids and mask in, unit vectors out) in `length_chunks`:
        tokenised as fastembed does, each chunk cut to its own longest text (int8: one
        text a chunk)."""
        from mesh.router.usem_onnx import OUTPUT_NAME

        limit = 1 if self.int8 else self._batch_size
        out = np.empty((len(texts), self.dim), np.float32)
        for start in range(0, len(texts), TOKENIZE_SLICE):
            encoded = tokenizer.encode_batch(texts[start : start + TOKENIZE_SLICE])
            ids = np.array([e.ids for e in encoded], np.int64)
            mask = np.array([e.attention_mask for e in encoded], np.int64)
            for rows, width in length_chunks(mask.sum(axis=1), limit):
                feed = {"input_ids": ids[rows, :width], "attention_mask": mask[rows, :width]}
                out[start + rows] = session.run([OUTPUT_NAME], feed)[0]
        return out


def serial_tokenizer() -> bool:
    """Let the tokenizers library tokenise a batch on the calling thread (the embedder's
    worker thread), unless the environment chose otherwise; True when this call chose.

    Why: its default splits every ``encode_batch`` over a pool of one thread per core whose
    threads wait for work busily; the router's batches are a dozen short queries, which one
    thread tokenises in a fraction of the graph's time. Measured under `bench/load.py`
    (100 agents, semantic, closed loop): the pool's threads took 3-4 % of the router's CPU.
    The setting is read at every parallel call, so setting it before the first batch
    suffices; it is process-wide, which is why an explicit value is left alone.
    """
    if TOKENIZERS_PARALLELISM in os.environ:
        return False
    os.environ[TOKENIZERS_PARALLELISM] = "false"
    return True


def length_chunks(
    lengths: NDArray[np.int64], limit: int, slack: int = CHUNK_PADDING_TOKENS
) -> list[tuple[NDArray[np.intp], int]]:
    """Positions of `lengths` in chunks of at most `limit`, longest first, with each chunk's
    width (its longest length): a chunk ends where its padding would pass `slack` tokens."""
    order = np.argsort(-lengths, kind="stable")
    ordered: list[int] = lengths[order].tolist()
    chunks: list[tuple[NDArray[np.intp], int]] = []
    begin, padding = 0, 0
    for i in range(1, len(ordered)):
        padding += ordered[begin] - ordered[i]
        if padding > slack or i - begin >= limit:
            chunks.append((order[begin:i], ordered[begin]))
            begin, padding = i, 0
    if ordered:
        chunks.append((order[begin:], ordered[begin]))
    return chunks


def _session_of(model: TextEmbedding) -> ort.InferenceSession:
    import onnxruntime as ort

    session = getattr(getattr(model, "model", None), "model", None)
    if not isinstance(session, ort.InferenceSession):
        raise ConfigError(
            "fastembed internals changed: TextEmbedding.model.model is not an onnxruntime "
            f"InferenceSession (got {type(session).__name__}); update mesh.router.embedding"
        )
    return session


def _tokenizer_of(model: TextEmbedding) -> Tokenizer:
    """The tokenizer fastembed loaded for `model` (what its own embed() tokenises with)."""
    from tokenizers import Tokenizer

    tokenizer = getattr(getattr(model, "model", None), "tokenizer", None)
    if not isinstance(tokenizer, Tokenizer):
        raise ConfigError(
            "fastembed internals changed: TextEmbedding.model.tokenizer is not a tokenizers "
            f"Tokenizer (got {type(tokenizer).__name__}); update mesh.router.embedding"
        )
    return tokenizer


def _rebuild_session(model: TextEmbedding, *, threads: int, spin: bool) -> None:
    """Replace the session fastembed loaded with one using our threads and spinning.

    Why: fastembed (0.9) builds its own ``ort.SessionOptions`` and exposes only ``threads``
    (which it writes to both intra- and inter-op) and ``enable_cpu_mem_arena``; it has no way to
    set ``session.intra_op.allow_spinning``. ONNX Runtime's default lets idle pool threads
    busy-wait for work, which between the router's small queries keeps a core busy.
    So the loaded session is rebuilt from its own model path and options (graph optimisation,
    arena, providers as fastembed chose them), changing only threads and spinning. Costs one
    extra session load (~0.3 s) at start; `embed()` is untouched.

    Raises:
        ConfigError: fastembed's internals no longer look as expected (the layout
            ``TextEmbedding.model.model`` holding a file-backed ``InferenceSession``).
    """
    import onnxruntime as ort

    old = _session_of(model)
    path = getattr(old, "_model_path", None)
    if not isinstance(path, str) or not path:
        raise ConfigError(
            "fastembed internals changed: its onnxruntime session was not loaded from a file; "
            "update mesh.router.embedding._rebuild_session"
        )
    options = old.get_session_options()
    options.intra_op_num_threads = threads
    # fastembed runs the graph sequentially (ORT_SEQUENTIAL), which never uses the inter-op pool
    options.inter_op_num_threads = 1
    allow = "1" if spin else "0"
    options.add_session_config_entry("session.intra_op.allow_spinning", allow)
    options.add_session_config_entry("session.inter_op.allow_spinning", allow)
    provider_options = old.get_provider_options()
    providers = [(name, provider_options.get(name, {})) for name in old.get_providers()]
    session = ort.InferenceSession(path, sess_options=options, providers=providers)
    model.model.model = session  # type: ignore[attr-defined]


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

    def cached(self, texts: Sequence[str]) -> Vectors | None:
        """The vectors of `texts` when the cache holds every one (counted as hits), else
        None (nothing counted): a caller on the event loop skips the worker thread."""
        keys = [self._key(t) for t in texts]
        with self._lock:
            found = [self._lru.get(key) for key in keys]
            if any(vec is None for vec in found):
                return None
            for key in keys:
                self._lru.move_to_end(key)
            self._hits += len(keys)
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, vec in enumerate(found):
            out[i] = vec
        return out

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


def cached_vectors(embedder: Embedder, texts: Sequence[str]) -> Vectors | None:
    """`CachedEmbedder.cached` when `embedder` is one, else None (it must embed them)."""
    return embedder.cached(texts) if isinstance(embedder, CachedEmbedder) else None


def build_embedder(settings: Settings, *, cache_size: int = 4096) -> Embedder:
    """The router's embedder for `settings`: a `CachedEmbedder` over a `FastEmbedder`.

    ``settings.embedding_model`` is ``"usem3"`` (the default, bundled, converted on first
    start) or a fastembed model name. Nothing is loaded until `start()`.
    """
    return CachedEmbedder(FastEmbedder.from_settings(settings), maxsize=cache_size)
