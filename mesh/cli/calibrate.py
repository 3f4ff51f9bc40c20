"""`mesh calibrate --agents AGENTS.json --labelled LABELLED.jsonl [--learn LEARN.jsonl] [--json]`.

Routes a labelled set with the live router's scoring code (no RabbitMQ) and prints
top-1 accuracy, the chosen threshold, in-scope accuracy and OOS recall at it, AUROC
and the most overlapping agent pairs.

`mesh calibrate --from-decisions decisions.jsonl [--feedback trace.jsonl] [--json]` reads the
observer's decision log instead (no model): the distribution of the similarity the threshold
gates, the no-match share and a suggested threshold with what it would change
(`mesh.router.calibrate_log`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mesh.cli._args import require_router_stack
from mesh.config import Settings
from mesh.errors import CalibrationDataError

if TYPE_CHECKING:  # the router's modules need numpy (the `router` extra): imported when run
    from mesh.router.calibrate import CalibrationReport
    from mesh.router.calibrate_log import LogCalibration


def register(sub: Any) -> None:
    p = sub.add_parser(
        "calibrate", help="measure routing accuracy and choose the similarity threshold"
    )
    p.add_argument("--agents", type=Path, help="AGENTS.json registrations")
    p.add_argument("--labelled", type=Path, help="JSONL {text, expected}")
    p.add_argument("--learn", type=Path, help="JSONL outcomes fed to the learning path first")
    p.add_argument(
        "--from-decisions",
        type=Path,
        metavar="FILE",
        help="the observer's decisions.jsonl: suggest a threshold from live decisions",
    )
    p.add_argument(
        "--feedback",
        type=Path,
        metavar="FILE",
        help="with --from-decisions: the observer's trace.jsonl (its route.feedback lines)",
    )
    p.add_argument(
        "--target-no-match",
        type=float,
        default=None,
        metavar="SHARE",
        help="with --from-decisions and too little feedback: the no-match share to aim at "
        "(default: mesh.router.calibrate_log.TARGET_NO_MATCH, 0.10)",
    )
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
    if args.from_decisions is not None:
        return _from_decisions(args)
    if args.agents is None or args.labelled is None:
        print(
            "mesh calibrate: give --agents and --labelled, or --from-decisions FILE",
            file=sys.stderr,
        )
        return 2
    require_router_stack()
    from mesh.router.calibrate import load_agents, load_labelled, run_calibration
    from mesh.router.embedding import build_embedder

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


def _from_decisions(args: argparse.Namespace) -> int:
    from mesh.router.calibrate_log import (
        TARGET_NO_MATCH,
        calibrate_from_log,
        load_decisions,
        load_feedback,
    )

    if args.target_no_match is None:
        args.target_no_match = TARGET_NO_MATCH
    if not 0.0 <= args.target_no_match < 1.0:
        print("mesh calibrate: --target-no-match must be in [0, 1)", file=sys.stderr)
        return 2
    try:
        decisions = load_decisions(args.from_decisions)
        feedback = load_feedback(args.feedback) if args.feedback else None
        report = calibrate_from_log(decisions, feedback, target_no_match=args.target_no_match)
    except CalibrationDataError as exc:
        print(f"mesh calibrate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report.as_dict()))
    else:
        _print_log(report)
    return 0


def _print_log(r: LogCalibration) -> None:
    strategies = ", ".join(f"{k} {v}" for k, v in r.strategies.items())
    print(f"decisions        {r.decisions}  ({strategies})")
    print(f"scored           {r.scored}  (with a candidate the threshold applies to)")
    others = ", ".join(f"{t} x{n}" for t, n in r.other_thresholds.items())
    print(f"threshold now    {r.current_threshold:.3f}" + (f"  (also: {others})" if others else ""))
    print("best similarity  " + "  ".join(f"{k} {v:.3f}" for k, v in r.percentiles.items()))
    peak = max(n for _, n in r.histogram)
    for low, n in r.histogram:
        mark = "<" if low + 0.05 <= r.current_threshold else " "
        bar = "#" * max(1, round(40 * n / peak))
        print(f"  {mark} {low:5.2f}-{low + 0.05:4.2f} {n:6d} {bar}")
    print(f"no-match share   {r.no_match_share:.1%}  (below the threshold)")
    if r.feedback_good or r.feedback_bad:
        print(f"feedback         {r.feedback_good} good, {r.feedback_bad} bad")
    how = (
        "best separates good from bad feedback"
        if r.method == "feedback"
        else "aims at the no-match share (too little feedback)"
    )
    print(f"suggested        {r.suggested_threshold:.3f}  ({how})")
    print(
        f"  no-match share {r.no_match_share:.1%} -> {r.no_match_share_suggested:.1%}: "
        f"{r.newly_routed} more routed, {r.newly_turned_away} more turned away"
    )
    if r.good_kept is not None:
        print(f"  good kept      {r.good_kept[0]:.1%} -> {r.good_kept[1]:.1%}")
    if r.bad_turned_away is not None:
        print(f"  bad turned away {r.bad_turned_away[0]:.1%} -> {r.bad_turned_away[1]:.1%}")
    print(f"set MESH_SIMILARITY_THRESHOLD={r.suggested_threshold:.3f} to use it")
