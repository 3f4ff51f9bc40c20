"""The first pass (`mesh.router.firstpass`) against the full pass, on agents built from CLINC150.

Usage: ``python bench/first_pass.py [--agents N] [--queries N]`` (defaults 10,000 and 1,000).

The 150 CLINC150 agents of bench/data/clinc150 are registered as they are; the other agents
are made from them: agent ``j`` takes the capability text of intent ``j mod 150`` and 5 texts
drawn from that intent's examples and learning texts, so every intent has tens of near
twins, the hard case for a pass that keeps only a few hundred rows. Each validation request
(in-scope ones, a seeded sample) is decided twice through `scoring.score` as the live
router calls it, with the first pass and with every prototype read, on one BLAS thread.

Printed: how often the two passes choose the same agent, top-1 of each (the chosen agent's
intent is the expected one), and the decision time of each (median of 5 rounds).
Embedding the texts (about 4,000) takes a few seconds; the model is the router's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from mesh.config import Settings
from mesh.router.embedding import build_embedder
from mesh.router.fitting import FitConfig
from mesh.router.index import CapabilityIndex
from mesh.router.scoring import ScoreWeights, score
from mesh.router.threads import limit_blas_threads

DATA = Path(__file__).resolve().parent / "data" / "clinc150"
ROUNDS = 5


def _read(name: str) -> list[dict[str, object]]:
    path = DATA / name
    if name.endswith(".json"):
        loaded: list[dict[str, object]] = json.loads(path.read_text())
        return loaded
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=_positive, default=10_000)
    parser.add_argument("--queries", type=_positive, default=1_000)
    args = parser.parse_args()
    settings = Settings.from_env()
    limit_blas_threads(settings.blas_threads)
    rng = np.random.default_rng(0)

    agents = _read("agents.json")
    learn: dict[str, list[str]] = {}
    for row in _read("learn.jsonl"):
        learn.setdefault(str(row["expected"]), []).append(str(row["text"]))
    val = [r for r in _read("val.jsonl") if r.get("expected")]
    val = [val[int(i)] for i in rng.choice(len(val), min(args.queries, len(val)), replace=False)]

    embedder = build_embedder(settings)
    embedder.start()
    pools = {
        str(a["agent_id"]): [*map(str, a["examples"]), *learn.get(str(a["agent_id"]), [])]  # type: ignore[call-overload]
        for a in agents
    }
    texts = sorted(
        {str(a["capability_text"]) for a in agents}
        | {t for pool in pools.values() for t in pool}
        | {str(r["text"]) for r in val}
    )
    print(f"embedding {len(texts)} texts with {embedder.model_id} ...", flush=True)
    vectors = dict(zip(texts, embedder.embed(texts), strict=True))

    index = CapabilityIndex(embedder.dim)
    for j in range(args.agents):
        agent = agents[j % len(agents)]
        intent = str(agent["agent_id"])
        capability = str(agent["capability_text"])
        if j < len(agents):
            examples = [str(t) for t in agent["examples"]]  # type: ignore[attr-defined]
            agent_id = intent
        else:
            pool = pools[intent]
            examples = [pool[int(i)] for i in rng.choice(len(pool), 5, replace=False)]
            agent_id = f"{intent}#{j}"
        index.add(
            agent_id,
            vectors[capability],
            np.stack([vectors[t] for t in examples]),
            texts=[capability, *examples],
        )
        if (j + 1) % 2_000 == 0:
            print(f"  {j + 1} agents registered", flush=True)
    t0 = time.perf_counter()
    index.refit()
    print(f"fitted in {time.perf_counter() - t0:.1f} s")
    if not index.first_pass:
        print(
            f"no first pass below {index.fit_config.first_pass_agents} agents: "
            "both columns below time the full pass"
        )
    # no threshold: every request gets an agent, so the two passes are compared on all
    weights = ScoreWeights.from_settings(settings, threshold=0.0)
    on = index.fit_config
    off = replace(on, first_pass_agents=0)

    def decide(cfg: FitConfig) -> tuple[list[str | None], list[float]]:
        index.fit_config = cfg
        rounds = []
        chosen: list[str | None] = []
        for _ in range(ROUNDS):
            times, chosen = [], []
            for row in val:
                text = str(row["text"])
                t = time.perf_counter()
                decision = score(index, vectors[text], weights, query_text=text)
                times.append(time.perf_counter() - t)
                chosen.append(decision.agent_id)
            rounds.append(np.percentile(times, (50, 99)) * 1e3)
        return chosen, [float(x) for x in np.median(rounds, axis=0)]

    first, first_t = decide(on)
    full, full_t = decide(off)
    index.fit_config = on
    expected = [str(r["expected"]) for r in val]

    def top1(chosen: list[str | None]) -> float:
        hits = sum(
            c is not None and c.split("#")[0] == e for c, e in zip(chosen, expected, strict=True)
        )
        return hits / len(expected)

    same = sum(a == b for a, b in zip(first, full, strict=True)) / len(val)
    print(
        f"{len(index)} agents, {len(val)} in-scope val requests, "
        f"BLAS threads {settings.blas_threads}"
    )
    print(f"  same agent as the full pass: {same:.4f}")
    print(f"  top-1 (intent): first pass {top1(first):.4f}  full pass {top1(full):.4f}")
    print(
        f"  decision p50 / p99: first pass {first_t[0]:.3f} / {first_t[1]:.3f} ms  "
        f"full pass {full_t[0]:.3f} / {full_t[1]:.3f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
