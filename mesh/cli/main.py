"""The `mesh` command: argument parsing, logging set-up and signal wiring live only here.

Each sub-command is a module of `mesh.cli` exposing ``register(subparsers)``; it adds its
parser and sets ``func`` to a callable ``(args, settings) -> int`` (an exit code).
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from mesh.config import Settings
from mesh.errors import ConfigError, ServiceUnavailable

#: sub-command modules, in the order `mesh --help` lists them
COMMAND_MODULES = (
    "mesh.cli.run",
    "mesh.cli.registry",
    "mesh.cli.request",
    "mesh.cli.agents",
    "mesh.cli.topology",
    "mesh.cli.schemas",
    "mesh.cli.model",
    "mesh.cli.explain",
    "mesh.cli.calibrate",
    "mesh.cli.feedback",
    "mesh.cli.task",
    "mesh.cli.dlq",
    "mesh.cli.demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mesh", description="Agent-Reach mesh")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if args.verbose < 2:
        # the mesh reports connection failures itself, in one sentence
        for noisy in ("aiormq.connection",):
            logging.getLogger(noisy).setLevel(logging.CRITICAL)
    try:
        settings = Settings.from_env()
        code: int = args.func(args, settings)
    except (ConfigError, ServiceUnavailable) as exc:
        print(f"mesh: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
