"""`mesh demo`'s namespace: a run's own unless one is named."""

from __future__ import annotations

import re

from mesh.cli.demo import NAMESPACE_PREFIX, run_namespace


def test_each_unnamed_run_gets_a_fresh_namespace_of_its_own() -> None:
    first, own = run_namespace(None)
    second, _ = run_namespace(None)
    assert own is True
    assert re.fullmatch(rf"{NAMESPACE_PREFIX}[0-9a-f]{{8}}", first)
    assert first != second


def test_a_named_namespace_is_used_as_given_and_not_owned() -> None:
    assert run_namespace("shop") == ("shop", False)
