"""FastEmbedder's ONNX Runtime threads: count and spinning are applied, idle threads do not spin.

Uses the real converted USE-m3 (from the prepared cache when `mesh model prepare` ran, else
converted once into a temporary directory); each session loads in well under a second.
"""

from __future__ import annotations

import os
import resource
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.router import embedding
from mesh.router.embedding import MAX_DEFAULT_THREADS, FastEmbedder
from mesh.router.usem_onnx import model_dir_name

SPIN_KEYS = ("session.intra_op.allow_spinning", "session.inter_op.allow_spinning")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prepared = Settings.from_env().model_cache_dir
    if (prepared / model_dir_name()).is_dir():
        return prepared
    return tmp_path_factory.mktemp("models")


def started(cache_dir: Path, **kwargs: Any) -> FastEmbedder:
    embedder = FastEmbedder(cache_dir=cache_dir, **kwargs)
    embedder.start()
    return embedder


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def gap_cpu(embedder: FastEmbedder, n: int = 100, gap_s: float = 0.01) -> float:
    """CPU (in cores) the process burns while the caller sleeps between `n` single queries.

    Only the sleeps are counted: that is what idle ONNX Runtime pool threads use. A spinning
    pool busy-waits through every gap shorter than its spin window (here ~0.7-1 core).
    """
    burnt = slept = 0.0
    for i in range(n):
        embedder.embed([f"route this request about invoices #{i}"])
        cpu, wall = _cpu_s(), time.perf_counter()
        time.sleep(gap_s)
        burnt += _cpu_s() - cpu
        slept += time.perf_counter() - wall
    return burnt / slept


@pytest.mark.parametrize(("threads", "spin"), [(1, False), (2, False), (2, True)])
def test_session_options_are_applied(cache_dir: Path, threads: int, spin: bool) -> None:
    embedder = started(cache_dir, threads=threads, spin=spin)
    options = embedder.session.get_session_options()  # read back from the live session
    assert options.intra_op_num_threads == threads
    assert options.inter_op_num_threads == 1
    for key in SPIN_KEYS:
        assert options.get_session_config_entry(key) == ("1" if spin else "0")
    assert embedder.session.get_providers() == ["CPUExecutionProvider"]
    assert embedder.embed(["still embeds"]).shape == (1, 512)


def test_defaults_come_from_settings(cache_dir: Path) -> None:
    settings = Settings(model_cache_dir=cache_dir)
    assert settings.embed_threads is None
    assert settings.embed_spin is False
    embedder = FastEmbedder.from_settings(settings)
    assert embedder.threads is None
    assert embedder.spin is False
    embedder.start()
    assert embedder.threads == min(MAX_DEFAULT_THREADS, os.cpu_count() or 1)
    options = embedder.session.get_session_options()
    assert options.intra_op_num_threads == embedder.threads
    assert options.get_session_config_entry(SPIN_KEYS[0]) == "0"


def test_threads_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="threads"):
        FastEmbedder(cache_dir=tmp_path, threads=0)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="a spinning pool needs a second core")
def test_idle_threads_do_not_busy_wait_between_queries(cache_dir: Path) -> None:
    # two threads: with one, ONNX Runtime has no pool thread that could spin at all.
    # with spin=True this measures ~0.7-1.0 of a core (checked when the test was written)
    embedder = started(cache_dir, threads=2, spin=False)
    assert gap_cpu(embedder) < 0.2


def test_changed_fastembed_internals_fail_clearly() -> None:
    broken: Any = SimpleNamespace(model=SimpleNamespace(model=None))
    with pytest.raises(ConfigError, match="fastembed internals changed"):
        embedding._rebuild_session(broken, threads=1, spin=False)


def test_a_router_process_caps_numpy_blas_threads() -> None:
    from threadpoolctl import threadpool_info, threadpool_limits

    from mesh.router.threads import limit_blas_threads

    before = {i["prefix"]: i["num_threads"] for i in threadpool_info()}
    try:
        assert not limit_blas_threads(None)
        assert limit_blas_threads(1)
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    finally:
        for prefix, n in before.items():
            threadpool_limits(limits={prefix: n})


def test_the_tokenizer_runs_serially_unless_the_environment_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(embedding.TOKENIZERS_PARALLELISM, raising=False)
    assert embedding.serial_tokenizer() is True
    assert os.environ[embedding.TOKENIZERS_PARALLELISM] == "false"
    monkeypatch.setenv(embedding.TOKENIZERS_PARALLELISM, "true")
    assert embedding.serial_tokenizer() is False
    assert os.environ[embedding.TOKENIZERS_PARALLELISM] == "true"
