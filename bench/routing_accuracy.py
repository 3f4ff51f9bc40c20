"""Routing accuracy on CLINC150 (bench/data/clinc150): runs `mesh calibrate` cold and learned.

Usage: ``python bench/routing_accuracy.py`` (add ``--json`` for raw objects). Acceptance:
top-1 >= 0.82 cold, >= 0.91 after ``--learn learn.jsonl``, AUROC >= 0.93.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent / "data" / "clinc150"


def run(learn: bool) -> dict[str, object]:
    cmd = [
        sys.executable, "-m", "mesh.cli.main", "calibrate",
        "--agents", str(DATA / "agents.json"),
        "--labelled", str(DATA / "val.jsonl"),
        "--json",
    ]
    if learn:
        cmd += ["--learn", str(DATA / "learn.jsonl")]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    result: dict[str, object] = json.loads(out)
    return result


def main() -> int:
    raw = "--json" in sys.argv[1:]
    head = ("variant", "top1", "thresh", "in-acc", "oos-rec", "auroc")
    print("{:8s} {:>6s} {:>7s} {:>7s} {:>7s} {:>6s}".format(*head))
    for learn in (False, True):
        r = run(learn)
        if raw:
            print(json.dumps(r))
            continue
        print(
            f"{'learned' if learn else 'cold':8s} {r['top1']:6.3f} {r['threshold']:7.3f} "
            f"{r['in_scope_accuracy']:7.3f} {r['oos_recall']:7.3f} {r['auroc']:6.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
