"""The README's fenced blocks and their markers: the one place tests read them from.

Every fenced block of README.md is preceded, on the line right above it, by one marker:

- ``<!-- test: NAME -->``: meant to run; a test takes it with `readme_block` and runs it
  against the real broker and Redis (`tests/unit/test_readme_blocks.py` checks that some
  test names it);
- ``<!-- illustrative: WHY -->``: not run, and the marker says why (a diagram, printed
  output, commands for hosts or a container engine this machine does not have, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README_PATH = ROOT / "README.md"
README = README_PATH.read_text(encoding="utf-8")

_FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```\n", re.S | re.M)
_MARKER = re.compile(r"<!-- (test|illustrative): ?(.*?) -->\n\Z")


@dataclass(frozen=True)
class Block:
    """One fenced block: its line, language, marker kind (test, illustrative or "") and
    the marker's text (the test name, or why the block is not run)."""

    line: int
    language: str
    kind: str
    note: str
    body: str


def fenced_blocks(text: str = README) -> list[Block]:
    """Every fenced block of `text`, in order, with the marker on the line above it."""
    blocks = []
    for found in _FENCE.finditer(text):
        before = text[: found.start()]
        above = before[before.rstrip("\n").rfind("\n") + 1 :]
        marker = _MARKER.search(above)
        blocks.append(
            Block(
                line=before.count("\n") + 1,
                language=found.group(1),
                kind=marker.group(1) if marker else "",
                note=marker.group(2).strip() if marker else "",
                body=found.group(2),
            )
        )
    return blocks


def readme_block(name: str) -> str:
    """The fenced block right after ``<!-- test: name -->`` in the README."""
    found = [b for b in fenced_blocks() if b.kind == "test" and b.note == name]
    assert len(found) == 1, f"README.md has {len(found)} blocks marked <!-- test: {name} -->"
    return found[0].body


def commands(name: str) -> list[str]:
    """The shell lines of the block `name`: comments stripped, ``\\`` continuations joined."""
    lines: list[str] = []
    pending = ""
    for raw in readme_block(name).splitlines():
        line = pending + raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line.strip():
            lines.append(" ".join(line.split()))
    return lines


__all__ = ["README", "ROOT", "Block", "commands", "fenced_blocks", "readme_block"]
