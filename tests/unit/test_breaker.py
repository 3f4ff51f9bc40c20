from __future__ import annotations

from mesh.clock import ManualClock
from mesh.router.breaker import BreakerBoard


def board(clock: ManualClock) -> BreakerBoard:
    return BreakerBoard(window_s=10, failure_ratio=0.5, min_calls=4, open_s=30, clock=clock)


def test_opens_above_half_failures_in_the_window() -> None:
    clock = ManualClock()
    b = board(clock)
    for ok in (True, False, False):
        assert b.record("a", ok) == "closed"
    assert b.record("a", False) == "open"  # 3 of 4 failed
    assert not b.allows("a")


def test_exactly_half_does_not_open() -> None:
    b = board(ManualClock())
    for ok in (True, False, True, False):
        b.record("a", ok)
    assert b.state("a") == "closed"


def test_old_outcomes_leave_the_window() -> None:
    clock = ManualClock()
    b = board(clock)
    for _ in range(3):
        b.record("a", False)
    clock.advance(11)
    assert b.record("a", False) == "closed"  # only one failure left in the window


def test_half_open_after_the_open_time_lets_one_probe_through() -> None:
    clock = ManualClock()
    b = board(clock)
    for _ in range(4):
        b.record("a", False)
    clock.advance(29.9)
    assert b.state("a") == "open"
    clock.advance(0.2)
    assert b.state("a") == "half_open" and b.allows("a")
    b.on_dispatch("a")
    assert not b.allows("a")  # the probe is out
    assert b.record("a", True) == "closed"
    assert b.allows("a")


def test_failed_probe_opens_again() -> None:
    clock = ManualClock()
    b = board(clock)
    for _ in range(4):
        b.record("a", False)
    clock.advance(31)
    b.on_dispatch("a")
    assert b.record("a", False) == "open"
    clock.advance(29)
    assert not b.allows("a")


def test_breakers_are_per_agent() -> None:
    b = board(ManualClock())
    for _ in range(4):
        b.record("a", False)
    assert not b.allows("a") and b.allows("b")


def test_blocked_names_open_breakers_and_half_open_ones_with_a_probe_out() -> None:
    clock = ManualClock()
    b = board(clock)
    for agent in ("a", "b"):
        b.record(agent, True)
    for _ in range(4):
        b.record("a", False)
    assert b.blocked() == {"a"}
    clock.advance(31)
    assert b.blocked() == set()  # half-open, no probe yet
    b.on_dispatch("a")
    assert b.blocked() == {"a"}
    b.record("a", True)  # the probe succeeded: closed
    assert b.blocked() == set()
    for _ in range(4):
        b.record("b", False)
    b.forget("b")
    assert b.blocked() == set()
