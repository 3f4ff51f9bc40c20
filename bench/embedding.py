"""Embedding benchmark: model load time, single-query latency, batch throughput.

Run from the repository root: ``python -m bench.embedding [--threads N]``. Other bench scripts
import `measure_query_latency` and `sample_queries`.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from mesh.config import Settings
from mesh.router.embedding import Embedder, FastEmbedder

_EN = (
    "summarise the quarterly report for {}",
    "translate this contract clause about {} into French",
    "why does the deployment of {} keep failing",
    "book a meeting with the {} team next week",
    "what is the refund policy for order {}",
    "write a python function that parses {}",
)
_ZH = (
    "帮我总结一下{}的季度报告",
    "订单{}的退款进度怎么样了",
    "请把关于{}的合同条款翻译成英文",
    "为什么{}的部署一直失败",
    "下周和{}团队约个会议",
)
_TOPICS = (
    "billing",
    "kubernetes",
    "invoices",
    "the mobile app",
    "payroll",
    "天气",
    "物流",
    "数据库",
)


def sample_queries(n: int, seed: int = 0) -> list[str]:
    """`n` distinct, router-like queries in English and Chinese (deterministic for a seed)."""
    rng = np.random.default_rng(seed)
    templates = _EN + _ZH
    out: list[str] = []
    for i in range(n):
        template = templates[int(rng.integers(len(templates)))]
        topic = _TOPICS[int(rng.integers(len(_TOPICS)))]
        out.append(template.format(f"{topic} #{i}"))
    return out


def _percentiles(samples_ms: list[float]) -> dict[str, float]:
    arr = np.asarray(samples_ms)
    return {
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
        "mean_ms": float(arr.mean()),
        "max_ms": float(arr.max()),
    }


def measure_query_latency(embedder: Embedder, n: int = 200, seed: int = 0) -> dict[str, Any]:
    """Embed `n` distinct queries one at a time (no cache hits); latency percentiles in ms.

    `embedder` must be started. Returns ``{"n", "p50_ms", "p99_ms", "mean_ms", "max_ms"}``.
    """
    queries = sample_queries(n + 5, seed)
    for q in queries[n:]:  # warm-up, not timed
        embedder.embed([q])
    samples = []
    for q in queries[:n]:
        started = time.perf_counter_ns()
        embedder.embed([q])
        samples.append((time.perf_counter_ns() - started) / 1e6)
    return {"n": n, **_percentiles(samples)}


def measure_batch_throughput(
    embedder: Embedder, batch_size: int = 64, n_texts: int = 1280, seed: int = 1
) -> dict[str, Any]:
    """Embed `n_texts` distinct texts in batches of `batch_size`; texts per second."""
    texts = sample_queries(n_texts, seed)
    embedder.embed(texts[:batch_size])  # warm-up
    started = time.perf_counter()
    for i in range(0, n_texts, batch_size):
        embedder.embed(texts[i : i + batch_size])
    elapsed = time.perf_counter() - started
    return {"n": n_texts, "batch_size": batch_size, "texts_per_s": n_texts / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=None, help="ONNX session threads")
    parser.add_argument("-n", type=int, default=200, help="single queries to time")
    args = parser.parse_args()
    settings = Settings.from_env()

    with tempfile.TemporaryDirectory() as tmp:
        first = FastEmbedder(settings.embedding_model, cache_dir=Path(tmp), threads=args.threads)
        started = time.perf_counter()
        first.start()
        print(f"load, first (conversion + load): {time.perf_counter() - started:.2f}s")
    embedder = FastEmbedder.from_settings(settings, threads=args.threads)
    embedder.start()  # converts into the real cache if that is empty
    cached = FastEmbedder.from_settings(settings, threads=args.threads)
    started = time.perf_counter()
    cached.start()
    print(f"load, cached:                    {time.perf_counter() - started:.2f}s")
    print(f"model_id={cached.model_id} dim={cached.dim}")

    lat = measure_query_latency(cached, n=args.n)
    print(
        f"single query ({lat['n']} distinct): p50 {lat['p50_ms']:.2f} ms, "
        f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms"
    )
    tput = measure_batch_throughput(cached, batch_size=settings.embed_batch_size)
    print(f"batch {tput['batch_size']}: {tput['texts_per_s']:.0f} texts/s")


if __name__ == "__main__":
    main()
