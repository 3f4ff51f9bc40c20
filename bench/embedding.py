"""Embedding benchmark: load time, latency, throughput, and the CPU the ONNX threads burn.

Run from the repository root::

    python -m bench.embedding [--threads N]                     # load, latency, throughput
    python -m bench.embedding --threads 1,2 --spin 0,1 -r 3     # compare thread settings

The comparison runs every (threads, spin) pair in a fresh process, `--repeats` times
(interleaved, so drift on a noisy machine hits every pair alike), and prints the median and
range of: CPU of the process while idle after queries, CPU burnt *between* paced queries (the
busy-wait symptom), single-query latency, and CPU ms per text and texts/s per batch size.
Other bench scripts import `measure_query_latency` and `sample_queries`.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
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


def process_cpu_s() -> float:
    """User + system CPU seconds of this process, all threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure_idle_cpu(embedder: Embedder, idle_s: float = 5.0, seed: int = 2) -> float:
    """Run 20 queries, then sleep `idle_s`; the process's CPU meanwhile, in cores (1.0 = one)."""
    for q in sample_queries(20, seed):
        embedder.embed([q])
    cpu, wall = process_cpu_s(), time.perf_counter()
    time.sleep(idle_s)
    return (process_cpu_s() - cpu) / (time.perf_counter() - wall)


def measure_gap_cpu(embedder: Embedder, n: int = 100, gap_s: float = 0.01, seed: int = 3) -> float:
    """CPU burnt in the gaps between `n` queries sent every `gap_s`, in cores.

    Only the sleeps are counted, so this is what other threads (ONNX Runtime's pool) use
    while the caller waits for the next query: ~0 without spinning.
    """
    burnt = slept = 0.0
    for q in sample_queries(n, seed):
        embedder.embed([q])
        cpu, wall = process_cpu_s(), time.perf_counter()
        time.sleep(gap_s)
        burnt += process_cpu_s() - cpu
        slept += time.perf_counter() - wall
    return burnt / slept


def measure_batch_cpu(
    embedder: Embedder, batch_size: int, n_texts: int = 256, seed: int = 4
) -> dict[str, float]:
    """Embed `n_texts` distinct texts in batches; process CPU ms per text and texts/s."""
    texts = sample_queries(n_texts + batch_size, seed)
    embedder.embed(texts[n_texts:])  # warm-up with other texts
    cpu, wall = process_cpu_s(), time.perf_counter()
    for i in range(0, n_texts, batch_size):
        embedder.embed(texts[i : min(i + batch_size, n_texts)])
    elapsed = time.perf_counter() - wall
    return {
        "cpu_ms_per_text": (process_cpu_s() - cpu) * 1e3 / n_texts,
        "texts_per_s": n_texts / elapsed,
    }


def _measure_config(
    threads: int, spin: bool, batch_sizes: tuple[int, ...], idle_s: float, n: int
) -> dict[str, float]:
    """One (threads, spin) pair, in the calling process; meant to run in a fresh one."""
    settings = Settings.from_env()
    embedder = FastEmbedder(
        settings.embedding_model,
        cache_dir=settings.model_cache_dir,
        threads=threads,
        spin=spin,
        batch_size=max(batch_sizes),
    )
    embedder.start()
    out: dict[str, float] = {}
    lat = measure_query_latency(embedder, n=n)
    out["p50_ms"], out["p99_ms"] = lat["p50_ms"], lat["p99_ms"]
    out["gap_cpu"] = measure_gap_cpu(embedder)
    out["idle_cpu"] = measure_idle_cpu(embedder, idle_s)
    for b in batch_sizes:
        res = measure_batch_cpu(embedder, b)
        out[f"b{b}_cpu_ms"] = res["cpu_ms_per_text"]
        out[f"b{b}_tps"] = res["texts_per_s"]
    return out


def compare(
    threads: list[int],
    spins: list[bool],
    *,
    repeats: int = 3,
    batch_sizes: tuple[int, ...] = (1, 8, 32, 64),
    idle_s: float = 5.0,
    n: int = 200,
) -> dict[tuple[int, bool], list[dict[str, float]]]:
    """Every (threads, spin) pair `repeats` times, each run in a fresh spawned process."""
    ctx = multiprocessing.get_context("spawn")
    runs: dict[tuple[int, bool], list[dict[str, float]]] = {
        (t, s): [] for t in threads for s in spins
    }
    with ctx.Pool(1, maxtasksperchild=1) as pool:
        for r in range(repeats):
            for key in runs:
                res = pool.apply(_measure_config, (*key, batch_sizes, idle_s, n))
                runs[key].append(res)
                print(
                    f"  run {r + 1}/{repeats} threads={key[0]} spin={int(key[1])} done", flush=True
                )
    return runs


def _fmt(values: list[float], digits: int) -> str:
    arr = np.asarray(values)
    return f"{np.median(arr):.{digits}f} [{arr.min():.{digits}f}-{arr.max():.{digits}f}]"


def print_comparison(runs: dict[tuple[int, bool], list[dict[str, float]]]) -> None:
    """A markdown table: median [min-max] over the repeats of every figure."""
    metrics = list(next(iter(runs.values()))[0])
    digits = {"idle_cpu": 3, "gap_cpu": 2}
    keys = list(runs)
    print("| figure | " + " | ".join(f"threads={t} spin={int(s)}" for t, s in keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for m in metrics:
        d = digits.get(m, 0 if m.endswith("_tps") else 2)
        cells = [_fmt([run[m] for run in runs[k]], d) for k in keys]
        print(f"| {m} | " + " | ".join(cells) + " |")


def _int_list(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--threads", type=_int_list, default=None, help="ONNX intra-op threads, e.g. 1 or 1,2"
    )
    parser.add_argument("--spin", type=_int_list, default=None, help="spinning, e.g. 0 or 0,1")
    parser.add_argument("-r", "--repeats", type=int, default=3, help="runs per pair (compare)")
    parser.add_argument("--idle-s", type=float, default=5.0, help="idle window (compare)")
    parser.add_argument("-n", type=int, default=200, help="single queries to time")
    args = parser.parse_args()
    if args.spin is not None or (args.threads is not None and len(args.threads) > 1):
        settings = Settings.from_env()
        threads = args.threads or [settings.embed_threads or 1]
        spins = [bool(s) for s in (args.spin or [int(settings.embed_spin)])]
        print_comparison(
            compare(threads, spins, repeats=args.repeats, idle_s=args.idle_s, n=args.n)
        )
        return
    _single(args.threads[0] if args.threads else None, args.n)


def _single(threads: int | None, n: int) -> None:
    settings = Settings.from_env()

    with tempfile.TemporaryDirectory() as tmp:
        first = FastEmbedder(settings.embedding_model, cache_dir=Path(tmp), threads=threads)
        started = time.perf_counter()
        first.start()
        print(f"load, first (conversion + load): {time.perf_counter() - started:.2f}s")
    embedder = FastEmbedder.from_settings(settings, threads=threads)
    embedder.start()  # converts into the real cache if that is empty
    cached = FastEmbedder.from_settings(settings, threads=threads)
    started = time.perf_counter()
    cached.start()
    print(f"load, cached:                    {time.perf_counter() - started:.2f}s")
    print(
        f"model_id={cached.model_id} dim={cached.dim} threads={cached.threads} spin={cached.spin}"
    )

    lat = measure_query_latency(cached, n=n)
    print(
        f"single query ({lat['n']} distinct): p50 {lat['p50_ms']:.2f} ms, "
        f"p99 {lat['p99_ms']:.2f} ms, max {lat['max_ms']:.2f} ms"
    )
    tput = measure_batch_throughput(cached, batch_size=settings.embed_batch_size)
    print(f"batch {tput['batch_size']}: {tput['texts_per_s']:.0f} texts/s")


if __name__ == "__main__":
    main()
