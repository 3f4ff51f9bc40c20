"""`mesh worker --reload`: restart the worker whenever a Python file of the app changes.

For development only. This process runs no agent: it watches the app's folder
(``--app-dir``, default the current directory) with `watchfiles` (the ``reload`` extra,
imported only here) and runs ``mesh worker`` without ``--reload`` as a child process. On a
change to a ``.py`` file the child gets SIGINT, so it drains as on Ctrl-C (its in-flight
tasks get ``--grace-s``; what remains goes back to the agent's queue), then a new child
starts with the new code. Ctrl-C stops the child and the watcher.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import math
import shlex
import sys
from pathlib import Path
from typing import Any

from mesh.distribution import extra_hint
from mesh.errors import ConfigError

#: seconds a child gets beyond its ``--grace-s`` to stop on SIGINT before it is killed
STOP_MARGIN_S = 5.0


def watchfiles() -> Any:
    """The `watchfiles` module, or a `ConfigError` naming the extra that installs it."""
    try:
        return importlib.import_module("watchfiles")
    except ImportError:
        raise ConfigError(
            f"mesh worker --reload watches files with watchfiles, which is not installed: "
            f"{extra_hint('reload')}"
        ) from None


def child_command(args: argparse.Namespace) -> list[str]:
    """The ``mesh worker`` command line the watcher runs: the same, without ``--reload``."""
    command = [sys.executable, "-m", "mesh.cli.main"]
    if args.verbose:
        command.append("-" + "v" * args.verbose)
    command += ["worker", *args.agents, "--grace-s", str(args.grace_s)]
    command += ["--app-dir", str(watched_dir(args))]
    if args.concurrency is not None:
        command += ["--concurrency", str(args.concurrency)]
    if args.instance_id is not None:
        command += ["--instance-id", args.instance_id]
    return command


def watched_dir(args: argparse.Namespace) -> Path:
    return Path(args.app_dir).resolve() if args.app_dir else Path.cwd()


def run_with_reload(args: argparse.Namespace) -> int:
    """Run the worker as a child, restarted on every change to a ``.py`` file; exit 0."""
    wf = watchfiles()
    folder = watched_dir(args)
    if not folder.is_dir():
        raise ConfigError(f"--app-dir {args.app_dir!r} is not a directory")
    command = child_command(args)

    def changed(changes: set[tuple[Any, str]]) -> None:
        names = sorted({Path(path).name for _, path in changes})
        print(f"changed: {', '.join(names)}; restarting the worker", file=sys.stderr, flush=True)

    print(
        f"mesh worker --reload: watching {folder} for *.py changes (development only); "
        "Ctrl-C to stop",
        file=sys.stderr,
        flush=True,
    )
    options: dict[str, Any] = {}
    if "sigint_timeout" in inspect.signature(wf.run_process).parameters:
        # SIGINT, then the drain's time before a SIGKILL (older releases wait 5 s)
        options["sigint_timeout"] = math.ceil(args.grace_s + STOP_MARGIN_S)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: the child is stopped too
        wf.run_process(
            folder,
            target=shlex.join(command),
            target_type="command",
            callback=changed,
            watch_filter=wf.PythonFilter(),
            **options,
        )
    return 0


__all__ = ["child_command", "run_with_reload", "watchfiles"]
