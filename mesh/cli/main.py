"""The `mesh` command: argument parsing, logging set-up and signal wiring live only here.

Each sub-command is a module of `mesh.cli` exposing ``register(subparsers)``; it adds its
parser and sets ``func`` to a callable ``(args, settings) -> int`` (an exit code).

Exit codes: 0 done, 1 a failure (a service down, a broker refusal, a bad setting), 2 a
usage error (a flag or argument; the line names it), 130 interrupted. Every error is one
line on stderr; ``-vv`` adds the library logs behind it.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

import aio_pika

from mesh.cli._args import ROUTER_HINT, ROUTER_STACK, USAGE, MeshArgumentParser, UsageError
from mesh.cli._broker import describe_channel_error
from mesh.config import Settings
from mesh.distribution import DISTRIBUTION, installed_version
from mesh.errors import MeshError
from mesh.logs import configure

#: sub-command modules, in the order `mesh --help` lists them
COMMAND_MODULES = (
    "mesh.cli.run",
    "mesh.cli.bridge",
    "mesh.cli.registry",
    "mesh.cli.request",
    "mesh.cli.agents",
    "mesh.cli.topology",
    "mesh.cli.access",
    "mesh.cli.schemas",
    "mesh.cli.asyncapi",
    "mesh.cli.model",
    "mesh.cli.explain",
    "mesh.cli.calibrate",
    "mesh.cli.feedback",
    "mesh.cli.task",
    "mesh.cli.events",
    "mesh.cli.observer",
    "mesh.cli.trace",
    "mesh.cli.stats",
    "mesh.cli.health",
    "mesh.cli.settings",
    "mesh.cli.dlq",
    "mesh.cli.human",
    "mesh.cli.demo",
)


def version() -> str:
    return installed_version()


def build_parser() -> argparse.ArgumentParser:
    parser = MeshArgumentParser(
        prog="mesh",
        description="Agent-Reach: a RabbitMQ worker mesh for AI agents. Settings come from "
        "MESH_* environment variables (and a .env file in the current directory).",
    )
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-vv: debug)"
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"mesh ({DISTRIBUTION}) {version()}",
        help=f"print the installed {DISTRIBUTION} version and exit",
    )
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", help="what to run"
    )
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(sub)
    describe(parser)
    return parser


def describe(parser: argparse.ArgumentParser) -> None:
    """Give each sub-command's page (``mesh CMD --help``) its one-line help as description."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                if child.description is None:
                    child.description = helps.get(name)
                describe(child)


def missing_router_stack(exc: ModuleNotFoundError) -> bool:
    """Whether `exc` is a module of the `router` extra that this install lacks."""
    return (exc.name or "").split(".")[0] in ROUTER_STACK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # the mesh reports connection failures itself, in one sentence (-vv shows the frames)
    configure(None, "text", args.verbose)
    try:
        settings = Settings.from_env()
    except MeshError as exc:
        return fail(exc)
    configure(settings.log_level, settings.log_format, args.verbose)
    try:
        code: int = args.func(args, settings)
    except UsageError as exc:
        return fail(exc, USAGE)
    except MeshError as exc:
        return fail(exc)
    except aio_pika.exceptions.AMQPError as exc:
        return fail(describe_channel_error(exc, settings))
    except ModuleNotFoundError as exc:
        if not missing_router_stack(exc):
            raise
        return fail(f"{ROUTER_HINT} (no module {exc.name!r})")
    except KeyboardInterrupt:
        return 130
    return code


def fail(error: object, code: int = 1) -> int:
    """Print `error` as the one line ``mesh: ...`` on stderr; return `code`."""
    print(f"mesh: {error}", file=sys.stderr)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
