"""`mesh/worker/` has no import cycle (``TYPE_CHECKING`` imports count too)."""

from __future__ import annotations

import ast
from pathlib import Path

import mesh.worker

PACKAGE = "mesh.worker"
ROOT = Path(mesh.worker.__file__).parent


def _imports(path: Path) -> set[str]:
    """Modules of `mesh.worker` that `path` imports, wherever the import statement sits."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found |= {name for name in names if name.startswith(PACKAGE + ".")}
    return found


def import_graph() -> dict[str, set[str]]:
    modules = {f"{PACKAGE}.{p.stem}": p for p in ROOT.glob("*.py") if p.stem != "__init__"}
    return {name: _imports(path) & set(modules) for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_worker_package_has_no_import_cycle() -> None:
    graph = import_graph()
    assert {"mesh.worker.runtime", "mesh.worker.context", "mesh.worker.settle"} <= set(graph)
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_sees_type_checking_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from mesh.worker.runtime import WorkerRuntime\n"
    )
    assert _imports(module) == {"mesh.worker.runtime", "mesh.worker.runtime.WorkerRuntime"}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_only_the_settler_settles_deliveries() -> None:
    """ack, nack, reject and retry republishes live in `settle.py` alone."""
    for path in ROOT.glob("*.py"):
        if path.stem == "settle":
            continue
        text = path.read_text()
        for call in ("message.ack(", "message.nack(", "message.reject(", "DELAY_HEADER:"):
            assert call not in text, f"{path.name} settles a delivery ({call})"
