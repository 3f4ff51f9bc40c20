"""The hot path asks nothing per task that was decided at start (issue: hooks chosen once).

The modules a task passes through are parsed (not imported): no ``metrics``/``tracing``
``is None`` test and no ``access_control`` read outside the functions that compose a
component (constructors, ``start``, ``*_for`` factories). What they chose lives in
`mesh.hooks`, the guard, the reply path and the worker's answers.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

HOT = [
    "mesh/router/service.py",
    "mesh/router/intake.py",
    "mesh/router/returns.py",
    "mesh/router/choice.py",
    "mesh/router/dispatch.py",
    "mesh/router/plan.py",
    "mesh/router/endings.py",
    "mesh/router/settle.py",
    "mesh/router/results.py",
    "mesh/worker/runtime.py",
    "mesh/worker/settle.py",
    "mesh/worker/context.py",
    "mesh/worker/middleware.py",
    "mesh/client.py",
]
#: where a component is composed (once per process, not per task)
COMPOSING = {"__init__", "start", "_compose"}
#: off the task path: a caller's feedback goes over AMQP under access control
OFF_PATH = {"feedback"}


def _composing(name: str) -> bool:
    return name in COMPOSING or name in OFF_PATH or name.endswith("_for")


def _subject(node: ast.expr) -> str:
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def per_task_checks(path: Path) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))

    def visit(node: ast.AST, inside: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            inside = node.name
        if not _composing(inside):
            if isinstance(node, ast.Compare) and any(
                isinstance(op, ast.Is | ast.IsNot) for op in node.ops
            ):
                subject = _subject(node.left)
                if "metrics" in subject or "tracing" in subject:
                    found.append((node.lineno, f"{subject} is None"))
            if isinstance(node, ast.Attribute) and node.attr == "access_control":
                found.append((node.lineno, "access_control"))
        for child in ast.iter_child_nodes(node):
            visit(child, inside)

    visit(tree, "")
    return found


def test_no_per_task_branch_on_metrics_tracing_or_access_control() -> None:
    offending = {name: checks for name in HOT if (checks := per_task_checks(ROOT / name))}
    assert offending == {}


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "class C:\n"
        "    def __init__(self, s):\n"
        "        self.on = s.access_control\n"
        "    async def handle(self, m):\n"
        "        if self.metrics is not None:\n"
        "            pass\n"
        "        return self.settings.access_control\n"
    )
    assert per_task_checks(sample) == [(5, "metrics is None"), (7, "access_control")]
