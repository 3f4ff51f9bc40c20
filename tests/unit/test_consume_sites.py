"""Every consume site of `mesh` goes through `mesh.wire.Subscriber` (one consume module).

The source tree is parsed (not imported) and every call of a ``.consume(...)`` method is
listed with its file; the only one allowed is the Subscriber's own.
"""

from __future__ import annotations

import ast
from pathlib import Path

MESH = Path(__file__).resolve().parents[2] / "mesh"

#: the one place that calls ``queue.consume``
SUBSCRIBER = "mesh/wire/consume.py"

#: sites not moved yet, each with the reason; remove a line when its site moves over
ALLOWED: set[str] = set()


def consume_calls() -> list[tuple[str, int]]:
    """(path relative to the repository, line) of every ``<x>.consume(...)`` call."""
    found = []
    for path in sorted(MESH.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        rel = path.relative_to(MESH.parent).as_posix()
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "consume"
            ):
                found.append((rel, node.lineno))
    return found


def test_the_subscriber_is_the_only_consumer() -> None:
    calls = consume_calls()
    outside = [(path, line) for path, line in calls if path not in {SUBSCRIBER, *ALLOWED}]
    assert outside == [], f"consume outside mesh.wire.Subscriber: {outside}"
    assert [path for path, _ in calls].count(SUBSCRIBER) == 1


def test_the_allow_list_holds_only_sites_that_still_consume() -> None:
    """A site that moved over leaves the allow-list (the list cannot go stale)."""
    moved = ALLOWED - {path for path, _ in consume_calls()}
    assert not moved, f"moved over; drop from ALLOWED: {sorted(moved)}"


def test_the_moved_sites_use_the_subscriber() -> None:
    """The consume sites of the issue each build a `Subscriber` (or a `BandedSubscriber`,
    one `Subscriber` per priority band)."""
    sites = [
        "mesh/router/service.py",
        "mesh/client.py",
        "mesh/worker/runtime.py",
        "mesh/worker/control.py",
        "mesh/router/keeper.py",
        "mesh/router/bids.py",
        "mesh/router/results.py",
        "mesh/router/feedback_consumer.py",
        "mesh/cli/events.py",
        "mesh/registry/service.py",
        "mesh/registry/session.py",
        "mesh/registry/snapshot.py",
        "mesh/observer/feed.py",
    ]
    for site in sites:
        tree = ast.parse((MESH.parent / site).read_text(encoding="utf-8"))
        built = any(
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("Subscriber", "BandedSubscriber")
            for node in ast.walk(tree)
        )
        assert built, f"{site} does not consume through mesh.wire.Subscriber"
