"""`mesh asyncapi [--out PATH] [--check]`: the AsyncAPI 3.0 document of the topology."""

from __future__ import annotations

import argparse
from typing import Any

from mesh.asyncapi import render
from mesh.cli._export import add_out_arguments, write_or_check
from mesh.config import Settings


def register(sub: Any) -> None:
    p = sub.add_parser(
        "asyncapi",
        help="print (or write) the AsyncAPI 3.0 document of the configured namespace",
    )
    add_out_arguments(p, what="the document", example="asyncapi.json")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace, settings: Settings) -> int:
    return write_or_check(args, settings, render, command="mesh asyncapi")
