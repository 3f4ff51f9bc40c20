"""Multi-intent splitting on CLINC150: split precision and recall, and single-intent top-1.

Usage: ``python bench/multi_intent.py [--pairs 1000] [--floor F] [--margin M] [--sweep] [--json]``

The labelled sets are built here, deterministically (seed 0), from the CLINC150 rows in
bench/data/clinc150 (CC BY 3.0, Larson et al. 2019; see its README): two in-scope queries
of different intents joined by a connective the router splits at, English ("also",
"and also", "plus", sentence punctuation) and Chinese-style ("还有", "另外", "顺便")
between the English clauses; every row of the file alone (out-of-scope rows too) is a
negative. Nothing generated is written into the repository.

The router's own code decides: the cold index of the 150 agents (`mesh.router.calibrate`),
`mesh.router.clauses.split_clauses`, `mesh.router.scoring.score` with the live threshold
and `mesh.router.intents.find_intents`. ``--sweep`` prints the clause floors on ``learn.jsonl``
(the development set; the floor is chosen there), then the figures on ``val.jsonl``:

* precision: split rows that were compounds; recall: compounds split (any parts);
* parts right: compounds split into exactly their two intents, in order;
* top-1: single-intent val rows routed to their agent (no threshold, as `mesh calibrate`),
  before and with multi-intent (a single row that was split counts as wrong).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mesh.config import Settings  # noqa: E402
from mesh.router.calibrate import (  # noqa: E402
    Labelled,
    build_index,
    load_agents,
    load_labelled,
    route_all,
)
from mesh.router.clauses import split_clauses  # noqa: E402
from mesh.router.embedding import Embedder, build_embedder  # noqa: E402
from mesh.router.index import CapabilityIndex  # noqa: E402
from mesh.router.intents import DEFAULT_FLOOR, DEFAULT_MARGIN, Split, find_intents  # noqa: E402
from mesh.router.scoring import Decision, ScoreWeights, score  # noqa: E402
from mesh.router.thresholds import resolve_threshold  # noqa: E402

DATA = ROOT / "bench" / "data" / "clinc150"
#: how two queries are joined: English connectives, then Chinese-style ones
JOINS: tuple[str, ...] = (
    "{a}, also {b}",
    "{a} and also {b}",
    "{a}. also, {b}",
    "{a} plus {b}",
    "{a}? {b}",
    "{a} 还有 {b}",
    "{a}，另外{b}",
    "{a}，顺便{b}",
)


@dataclass(frozen=True)
class Row:
    text: str
    #: the agents of its intents in order (one: a single request; none: out of scope)
    agents: tuple[str, ...]


def compounds(rows: Sequence[Labelled], n: int, seed: int = 0) -> list[Row]:
    rng = random.Random(seed)
    inside = [r for r in rows if r.expected is not None]
    out: list[Row] = []
    while len(out) < n:
        a, b = rng.sample(inside, 2)
        if a.expected == b.expected:
            continue
        join = JOINS[len(out) % len(JOINS)]
        assert a.expected is not None and b.expected is not None
        out.append(Row(join.format(a=a.text, b=b.text), (a.expected, b.expected)))
    return out


def singles(rows: Sequence[Labelled]) -> list[Row]:
    return [Row(r.text, (r.expected,) if r.expected else ()) for r in rows]


class Detector:
    """The router's detection over the offline index: one embedding batch per set."""

    def __init__(self, index: CapabilityIndex, embedder: Embedder, weights: ScoreWeights):
        self.index, self.embedder, self.weights = index, embedder, weights
        self._vectors: dict[str, np.ndarray] = {}

    def splits(self, texts: Sequence[str], floor: float, margin: float) -> list[Split | None]:
        clauses = [split_clauses(t) for t in texts]
        many = [i for i, c in enumerate(clauses) if len(c) > 1]
        wanted = [texts[i] for i in many] + [c.text for i in many for c in clauses[i]]
        new = [t for t in dict.fromkeys(wanted) if t not in self._vectors]
        self._vectors.update(zip(new, _embed(self.embedder, new), strict=True))
        vectors = self._vectors
        out: list[Split | None] = [None] * len(texts)
        for i in many:
            whole = self._decide(texts[i], vectors[texts[i]])
            each = [self._decide(c.text, vectors[c.text]) for c in clauses[i]]
            out[i] = find_intents(texts[i], clauses[i], each, whole, floor=floor, margin=margin)
        return out

    def _decide(self, text: str, vector: np.ndarray) -> Decision:
        return score(self.index, vector, self.weights, query_text=text)


def _embed(embedder: Embedder, texts: Sequence[str], batch: int = 256) -> np.ndarray:
    unique = list(dict.fromkeys(texts))
    parts = [embedder.embed(unique[i : i + batch]) for i in range(0, len(unique), batch)]
    table = dict(zip(unique, np.concatenate(parts) if parts else [], strict=True))
    return np.stack([table[t] for t in texts]) if texts else np.empty((0, embedder.dim))


def figures(
    det: Detector, pos: list[Row], neg: list[Row], floor: float, margin: float
) -> dict[str, object]:
    split_pos = det.splits([r.text for r in pos], floor, margin)
    split_neg = det.splits([r.text for r in neg], floor, margin)
    tp = sum(s is not None for s in split_pos)
    fp = sum(s is not None for s in split_neg)
    exact = sum(
        s is not None and tuple(p.agent_id for p in s.parts) == r.agents
        for s, r in zip(split_pos, pos, strict=True)
    )
    return {
        "floor": floor,
        "margin": margin,
        "compounds": len(pos),
        "singles": len(neg),
        "split_compounds": tp,
        "split_singles": fp,
        "precision": round(tp / (tp + fp), 4) if tp + fp else 1.0,
        "recall": round(tp / len(pos), 4),
        "parts_right": round(exact / len(pos), 4),
        "_split_neg": [s is not None for s in split_neg],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1000, help="compounds per set")
    parser.add_argument("--floor", type=float, default=DEFAULT_FLOOR, help="a clause's bar")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--sweep", action="store_true", help="sweep the floor on learn.jsonl")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not (DATA / "agents.json").is_file():
        print(f"skipped: {DATA} not found")
        return 0
    settings = Settings()
    embedder = build_embedder(settings)
    embedder.start()
    agents = load_agents(DATA / "agents.json")
    index = build_index(agents, embedder, memory_size=settings.example_memory_size)
    index.refit()
    threshold = resolve_threshold(settings, embedder.model_id)
    det = Detector(index, embedder, ScoreWeights.from_settings(settings, threshold=threshold))
    print(f"model {embedder.model_id}, threshold {threshold:.3f}, {len(index)} agents")
    if args.sweep:
        learn = load_labelled(DATA / "learn.jsonl")
        pos, neg = compounds(learn, args.pairs, seed=1), singles(learn)
        print("learn.jsonl (development): floor precision recall parts_right singles_split")
        for floor in (0.30, 0.35, 0.40, threshold):
            f = figures(det, pos, neg, floor, args.margin)
            print(
                f"  {floor:.2f}  {f['precision']:.4f}  {f['recall']:.4f}  {f['parts_right']:.4f}"
                f"  {f['split_singles']}"
            )
    val = load_labelled(DATA / "val.jsonl")
    pos, neg = compounds(val, args.pairs), singles(val)
    f = figures(det, pos, neg, args.floor, args.margin)
    split_neg = f.pop("_split_neg")
    assert isinstance(split_neg, list)
    weights = ScoreWeights.from_settings(settings, threshold=0.0)
    inside = [r for r in val if r.expected is not None]
    texts = [r.text for r in inside]
    chosen, _ = route_all(index, _embed(embedder, texts), texts, weights)
    split_of = dict(zip((r.text for r in neg), split_neg, strict=True))
    right = [c == r.expected for c, r in zip(chosen, inside, strict=True)]
    before = sum(right) / len(inside)
    after = sum(ok and not split_of[r.text] for ok, r in zip(right, inside, strict=True))
    f["top1_before"] = round(before, 4)
    f["top1_after"] = round(after / len(inside), 4)
    if args.json:
        print(json.dumps(f))
        return 0
    print(
        f"val.jsonl: {f['compounds']} compounds, {f['singles']} single rows, "
        f"floor {args.floor}, margin {args.margin}"
    )
    print(f"  split precision {f['precision']}  recall {f['recall']}")
    print(f"  parts right (both agents, in order) {f['parts_right']}")
    print(f"  singles split {f['split_singles']}, compounds split {f['split_compounds']}")
    print(f"  single-intent top-1 {f['top1_before']} -> {f['top1_after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
