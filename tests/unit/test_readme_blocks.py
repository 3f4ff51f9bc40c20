"""Every fenced block of README.md is either run by a test or marked illustrative.

A new block without a marker fails here, and so does a ``<!-- test: NAME -->`` that no
test takes (`tests.readme_blocks.readme_block("NAME")` or `commands("NAME")`)."""

from __future__ import annotations

import re

from tests.readme_blocks import ROOT, fenced_blocks

TESTS = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "tests").rglob("test_*.py"))


def test_every_block_is_tested_or_marked_illustrative() -> None:
    blocks = fenced_blocks()
    assert len(blocks) > 20  # the parser found the README's blocks
    unmarked = [f"README.md:{b.line} ```{b.language}" for b in blocks if not b.kind]
    assert not unmarked, (
        "blocks with neither <!-- test: NAME --> nor <!-- illustrative: WHY --> right above "
        f"them: {unmarked}"
    )
    silent = [f"README.md:{b.line}" for b in blocks if b.kind == "illustrative" and not b.note]
    assert not silent, f"illustrative blocks that do not say why: {silent}"


def test_every_tested_block_is_taken_by_a_test() -> None:
    names = [b.note for b in fenced_blocks() if b.kind == "test"]
    assert len(names) == len(set(names)), f"a test name marks two blocks: {sorted(names)}"
    taken = set(re.findall(r"""(?:readme_block|commands)\(\s*["']([\w-]+)["']""", TESTS))
    assert set(names) - taken == set(), "blocks marked for a test that no test takes"


def test_an_unmarked_block_is_found() -> None:
    text = "<!-- test: a -->\n```bash\nls\n```\n\nprose\n\n```bash\nrm -rf /\n```\n"
    found = [(b.kind, b.note, b.body) for b in fenced_blocks(text)]
    assert found == [("test", "a", "ls\n"), ("", "", "rm -rf /\n")]
