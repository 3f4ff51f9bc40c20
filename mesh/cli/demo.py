"""`mesh demo`: a customer-service team as separate processes, its failure stories live.

Runs ``mesh registry``, ``mesh router``, ``mesh observer`` and the team of the repository's
``agents/`` (``mesh worker agents.x:agent``, two instances where a story kills or freezes
one; the knowledge base as an HTTP endpoint behind ``mesh bridge http``; a Node.js agent
when node and npm are installed), sends the scripted requests of
``agents/demo_script.py``, prints each routing
decision as it happens and ends with a summary. Exit 0 only when every request got its
expected kind of answer. The example agents are not installed with the library: the
demo runs from a checkout (`--app-dir`, the current directory, or mesh's own checkout).
"""

from __future__ import annotations

import argparse
import importlib
import secrets
import signal
from pathlib import Path
from types import FrameType
from typing import Any

from mesh.cli._args import UsageError, require_router_stack
from mesh.cli._runner import put_on_path
from mesh.config import Settings
from mesh.errors import ConfigError

#: the scenario the demo plays (in the repository, not installed with the library)
SCENARIO_MODULE = "agents.demo_script"
SCENARIO_FILE = "agents/demo_script.py"
#: the prefix of the namespace a run gets when none is named (``demo-`` and 8 hex digits)
NAMESPACE_PREFIX = "demo-"


def run_namespace(named: str | None) -> tuple[str, bool]:
    """The run's namespace and whether the run made it up (then it is its own alone).

    Without ``--namespace`` each run gets a fresh one, so two demos at once (a test and a
    user) never clear each other's queues and keys."""
    if named:
        return named, False
    return f"{NAMESPACE_PREFIX}{secrets.token_hex(4)}", True


def register(sub: Any) -> None:
    p = sub.add_parser(
        "demo",
        help="run a customer-service team as separate processes and play its failure stories",
        description="From a checkout of the repository: registry, router, observer and a "
        "team of agents as processes, about 50 scripted requests (Chinese and English), a "
        "summary. Examples: mesh demo; mesh demo --quick --json summary.json",
    )
    p.add_argument("--quick", action="store_true", help="fewer requests, shorter waits")
    p.add_argument(
        "--namespace",
        default=None,
        help="namespace to run in (an earlier run's state in it is deleted first; "
        f"default: a fresh {NAMESPACE_PREFIX}XXXXXXXX of this run alone, deleted at the end "
        "unless --keep)",
    )
    p.add_argument(
        "--json", default=None, metavar="PATH", help="also write the summary as JSON to PATH"
    )
    p.add_argument(
        "--cleanup",
        action="store_true",
        help="delete a --namespace at the end (default: keep it for mesh trace / dlq list)",
    )
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the run's own namespace at the end (for mesh trace / dlq list)",
    )
    p.add_argument(
        "--app-dir",
        default=None,
        help=f"the checkout holding {SCENARIO_FILE} (default: the current directory, else "
        "the checkout mesh runs from)",
    )
    p.set_defaults(func=_run)


def checkout(app_dir: str | None) -> Path:
    """The repository checkout the demo runs from: `app_dir`, the cwd, or mesh's own."""
    candidates = [Path(app_dir)] if app_dir else [Path.cwd(), Path(__file__).resolve().parents[2]]
    for folder in candidates:
        if (folder / SCENARIO_FILE).is_file():
            return folder.resolve()
    raise ConfigError(
        f"mesh demo runs from a checkout of the repository (it needs {SCENARIO_FILE}): "
        "cd into one or pass --app-dir"
    )


def _terminated(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the demo as Ctrl-C does: processes stopped


def _run(args: argparse.Namespace, settings: Settings) -> int:
    require_router_stack()
    root = checkout(args.app_dir)
    put_on_path(str(root))
    from mesh.demo.run import run_demo

    scenario = importlib.import_module(SCENARIO_MODULE)
    namespace, own = run_namespace(args.namespace)
    if args.keep and args.cleanup:
        raise UsageError("--keep and --cleanup contradict each other")
    settings = settings.model_copy(update={"namespace": namespace})
    signal.signal(signal.SIGTERM, _terminated)
    return run_demo(
        settings,
        root,
        scenario,  # a module satisfying the Scenario protocol
        quick=args.quick,
        json_path=Path(args.json) if args.json else None,
        cleanup=args.cleanup or (own and not args.keep),
    )
