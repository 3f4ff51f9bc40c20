"""Decision time (embedding excluded) at 10 to 10,000 agents, and one-query embedding latency.

Usage: ``python bench/routing.py [--no-embed]``. Goal: p99 < 2 ms at 10,000 agents.
Agents get random unit vectors (5 examples each) and random texts drawn from a 5,000-word
vocabulary (a capability text and 5 examples, as the live selector feeds the lexical channel);
decisions go through `scoring.score` exactly as the live router calls it, query text included.
The index is given a fitted head at every size (past `FitConfig.max_cells` the live router
skips the fit, but the bench installs a random head to time that path anyway), so the
figures are the worst case.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace

import numpy as np

from mesh.config import Settings
from mesh.router.fitting import Head
from mesh.router.index import AgentStats, CapabilityIndex
from mesh.router.scoring import ScoreWeights, score
from mesh.router.threads import limit_blas_threads

DIM = 512
SIZES = (10, 100, 1_000, 10_000)
QUERIES = 1_000
#: rounds of `QUERIES` decisions per size: the figures are the median round's, next to the
#: worst round's p99 (on a shared VM a neighbour's burst can double one round's tail)
ROUNDS = 5


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


#: common words every text shares (like "please", "my"): long postings in the lexical index
COMMON = ("please", "can", "you", "my", "the", "what", "is", "for", "me", "how")


def _words(rng: np.random.Generator, k: int) -> str:
    picked = [f"w{int(j)}" for j in rng.zipf(1.3, k) % 5_000]
    return " ".join([*rng.choice(COMMON, 3), *picked])


class _Served:
    """A cold-start quota view where every cold agent had its share: each decision walks
    all of its contenders (the quota's slowest path)."""

    def counts(self, agent_id: str) -> tuple[int, int]:
        return (0, 1_000)


def decision_times(n: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """p50 and p99 of the median round, and the worst round's p99 (ms)."""
    index = CapabilityIndex(DIM, seed=0)
    for i in range(n):
        base = rng.standard_normal(DIM)
        examples = _unit(base + 0.5 * rng.standard_normal((5, DIM)))
        index.add(
            f"agent-{i}",
            _unit(base),
            examples,
            tags={"team": str(i % 7)},
            keywords=(f"kw{i}",),
            stats=AgentStats(load=i % 3, max_concurrency=4, completed=i % 10),
            texts=[f"handles requests about {_words(rng, 4)}"] + [_words(rng, 8) for _ in range(5)],
        )
    fit = index.fit_directions()
    if not fit.fitted:  # too large to fit: install a random head to time that path
        cfg = index.fit_config
        width = cfg.members * cfg.hidden
        head = Head(
            hidden_weights=rng.standard_normal((cfg.members, DIM, cfg.hidden), np.float32),
            hidden_biases=np.zeros((cfg.members, cfg.hidden), np.float32),
            weights=rng.standard_normal((n, width), np.float32) * np.float32(0.1),
            biases=np.zeros((n, cfg.members), np.float32),
        )
        fit = replace(fit, head=head)
    assert index.apply_fit(fit)
    weights = ScoreWeights.from_settings(Settings(), threshold=0.3)
    queries = _unit(rng.standard_normal((QUERIES, DIM)))
    texts = [f"{_words(rng, 10)} kw3" for _ in range(QUERIES)]
    quota = _Served()
    rounds = []
    for _ in range(ROUNDS):
        times = np.empty(QUERIES)
        for q in range(QUERIES):
            t0 = time.perf_counter()
            score(index, queries[q], weights, query_text=texts[q], quota=quota)
            times[q] = time.perf_counter() - t0
        rounds.append(np.percentile(times, (50, 99)) * 1e3)
    p50, p99 = np.median(rounds, axis=0)
    return float(p50), float(p99), float(max(r[1] for r in rounds))


def embedding_latency() -> tuple[str, float, float]:
    from mesh.router.embedding import build_embedder  # loads the model: keep it optional

    embedder = build_embedder(Settings.from_env())
    embedder.start()
    texts = [f"please book a table for {i} people tonight at {i % 12} pm" for i in range(200)]
    embedder.embed(["warm up"])
    times = np.empty(len(texts))
    for i, text in enumerate(texts):  # distinct texts: no cache hit
        t0 = time.perf_counter()
        embedder.embed([text])
        times[i] = time.perf_counter() - t0
    return (
        embedder.model_id,
        float(np.percentile(times, 50) * 1e3),
        float(np.percentile(times, 99) * 1e3),
    )


def main() -> int:
    rng = np.random.default_rng(0)
    # the BLAS threads a router runs with (`mesh.services`: one by default), not numpy's
    # default of one per core, whose spinning workers a router never has
    blas = Settings.from_env().blas_threads
    limit_blas_threads(blas)
    print(
        f"decision time, embedding excluded (median of {ROUNDS} rounds of {QUERIES} queries, "
        f"BLAS threads {blas or 'as numpy chose'})"
    )
    for n in SIZES:
        p50, p99, worst = decision_times(n, rng)
        print(
            f"  {n:>6d} agents  p50 {p50:6.3f} ms  p99 {p99:6.3f} ms  "
            f"(worst round p99 {worst:6.3f} ms)"
        )
    if "--no-embed" not in sys.argv[1:]:
        model, p50, p99 = embedding_latency()
        print(f"single-query embedding ({model}): p50 {p50:6.2f} ms  p99 {p99:6.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
