"""`mesh calibrate --agents AGENTS.json --labelled LABELLED.jsonl [--learn LEARN.jsonl] [--json]`.

Routes a labelled set with the live router's scoring code (no RabbitMQ) and prints
top-1 accuracy, the chosen threshold, in-scope accuracy and OOS recall at it, AUROC
and the most overlapping agent pairs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from mesh.cli._args import require_router_stack
from mesh.config import Settings
from mesh.errors import CalibrationDataError
from mesh.router.calibrate import (
    CalibrationReport,
    load_agents,
    load_labelled,
    run_calibration,
)
from mesh.router.embedding import build_embedder


def register(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="measure routing accuracy and choose the similarity threshold"
    )
    p.add_argument("--agents", type=Path, required=True, help="AGENTS.json registrations")
    p.add_argument("--labelled", type=Path, required=True, help="JSONL {text, expected}")
    p.add_argument("--learn", type=Path, help="JSONL outcomes fed to the learning path first")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_calibrate)


class _Progress:
    """One overwritten status line on stderr (only when stderr is a terminal)."""

    def __init__(self) -> None:
        self._tty = sys.stderr.isatty()
        self._start = time.monotonic()

    def __call__(self, message: str) -> None:
        line = f"[{time.monotonic() - self._start:6.1f}s] {message}"
        if self._tty:
            print(f"\r\033[K{line}", end="", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self._tty:
            print("\r\033[K", end="", file=sys.stderr, flush=True)


def _calibrate(args: argparse.Namespace, settings: Settings) -> int:
    require_router_stack()
    progress = _Progress()
    try:
        agents = load_agents(args.agents)
        known = {a.agent_id for a in agents}
        labelled = load_labelled(args.labelled, known)
        learn = load_labelled(args.learn, known) if args.learn else []
    except CalibrationDataError as exc:
        print(f"mesh calibrate: {exc}", file=sys.stderr)
        return 2  # the files named on the command line are unusable: a usage error
    progress(f"loading embedding model {settings.embedding_model}")
    embedder = build_embedder(settings)
    embedder.start()
    report = run_calibration(agents, labelled, embedder, settings, learn=learn, progress=progress)
    progress.done()
    if args.json:
        print(json.dumps({"model_id": embedder.model_id, **report.as_dict()}))
    else:
        _print(report, embedder.model_id)
    return 0


def _print(r: CalibrationReport, model_id: str) -> None:
    auroc = "n/a (no out-of-scope rows)" if r.auroc is None else f"{r.auroc:.3f}"
    print(f"model            {model_id}")
    print(f"agents           {r.agents}  (prototypes fitted: {'yes' if r.fitted else 'no'})")
    print(f"learned rows     {r.learned}")
    print(f"labelled rows    {r.labelled}  ({r.in_scope} in scope, {r.out_of_scope} out)")
    print(f"top-1 accuracy   {r.top1:.3f}  (in scope, no threshold)")
    print(f"threshold        {r.threshold:.3f}  (set MESH_SIMILARITY_THRESHOLD to use it)")
    print(f"  in-scope acc   {r.in_scope_accuracy:.3f}")
    print(f"  OOS recall     {r.oos_recall:.3f}")
    print(f"AUROC            {auroc}  (in scope vs out of scope)")
    print("most overlapping agent pairs (cosine of prototypes, confusions):")
    for o in r.overlaps:
        print(f"  {o.cosine:6.3f} {o.confusions:4d}  {o.a} <-> {o.b}")
