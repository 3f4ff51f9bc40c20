"""A router's own dispatches stay in an agent's load until a heartbeat taken after them."""

from __future__ import annotations

from mesh.router.stats import UnheardDispatches

LEASE_MS = 15_000


def test_a_dispatch_after_the_last_heartbeat_counts_until_a_later_one() -> None:
    unheard = UnheardDispatches()
    unheard.sent("a", 1_000)
    # the last heartbeat was taken before the dispatch: it cannot have counted it
    assert unheard.count("a", heard_ms=900, now_ms=1_100, lease_ms=LEASE_MS) == 1
    assert unheard.count("a", heard_ms=900, now_ms=1_200, lease_ms=LEASE_MS) == 1
    # a heartbeat taken after it counts it (or saw it end): no longer added
    assert unheard.count("a", heard_ms=1_050, now_ms=1_300, lease_ms=LEASE_MS) == 0
    assert unheard.count("b", heard_ms=0, now_ms=1_300, lease_ms=LEASE_MS) == 0


def test_an_outcome_ends_one_dispatch_and_a_lease_ends_them_all() -> None:
    unheard = UnheardDispatches()
    for at in (1_000, 1_010, 1_020):
        unheard.sent("a", at)
    assert unheard.count("a", heard_ms=900, now_ms=1_100, lease_ms=LEASE_MS) == 3
    unheard.ended("a")
    assert unheard.count("a", heard_ms=900, now_ms=1_100, lease_ms=LEASE_MS) == 2
    unheard.ended("b")  # an agent with none: nothing
    # no heartbeat within a lease: the agent is lapsed, its old dispatches forgotten
    assert unheard.count("a", heard_ms=900, now_ms=1_020 + LEASE_MS, lease_ms=LEASE_MS) == 0
    unheard.ended("a")
    assert unheard.count("a", heard_ms=900, now_ms=1_100, lease_ms=LEASE_MS) == 0
