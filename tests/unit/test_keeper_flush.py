"""A router writes its queued records and announces its counts on a clock, not once per
outcome message: a router that sees half the tasks sends as few messages, each fuller."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from mesh.router import keeper as keeper_module
from mesh.router.breaker import BreakerBoard
from mesh.router.keeper import COUNTS_INTERVAL_S, FLUSH_INTERVAL_S, IndexKeeper
from mesh.router.memory import ExampleMemory
from mesh.router.outcomes import COUNTS_EVENT, OutcomeLedger
from mesh.router.stats import UnheardDispatches
from mesh.schemas import Event, TaskEnvelope
from tests.unit.ledger_fakes import FakeConn, FakeMemory


class FakePublisher:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        self.events.append(event)


class Clock:
    """The keeper's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(keeper_module, "time", SimpleNamespace(monotonic=clock.monotonic))
    return clock


def _keeper() -> tuple[IndexKeeper, FakeMemory, FakePublisher]:
    memory, publisher = FakeMemory(slot=-1), FakePublisher()  # nothing sampled
    ledger = OutcomeLedger(cast(Any, FakeConn()), cast(ExampleMemory, memory), BreakerBoard())
    keeper = IndexKeeper.__new__(IndexKeeper)
    keeper.ledger = ledger
    keeper.publisher = cast(Any, publisher)
    keeper.keeper_id = "r1"
    keeper.outcome_events = 0
    keeper._stats_due = set()
    keeper._unheard = UnheardDispatches()
    keeper._wake = asyncio.Event()
    keeper._last_flush = keeper._last_counts = float("-inf")
    keeper._wake_at = float("inf")
    return keeper, memory, publisher


def _outcome(keeper: IndexKeeper) -> None:
    """A targeted task dispatched by this router, and its outcome event."""
    envelope = TaskEnvelope(capability="probe", target="a", timeout_ms=1_000)
    keeper.ledger.remember(envelope, "a", learns=False)
    event = Event(type="task.completed", task_id=envelope.task_id, agent_id="a")
    keeper.take(event, own=True)


async def test_outcomes_in_many_messages_are_written_and_counted_once_per_interval(
    clock: Clock,
) -> None:
    keeper, memory, publisher = _keeper()
    for _ in range(20):
        _outcome(keeper)
        await keeper._flush()  # a round of the loop for each outcome message
        clock.now += 0.005
    # the first went at once (an idle router loses no time), the others wait for the clock
    assert [len(w) for w in memory.writes] == [1]
    assert [e.type for e in publisher.events] == [COUNTS_EVENT]
    assert keeper._due_at() == 1_000.0 + FLUSH_INTERVAL_S

    clock.now = 1_000.0 + FLUSH_INTERVAL_S
    await keeper._flush()  # the records are due, the counts not yet
    assert [len(w) for w in memory.writes] == [1, 19]
    assert len(publisher.events) == 1
    assert keeper._due_at() == 1_000.0 + COUNTS_INTERVAL_S

    _outcome(keeper)
    await keeper._flush(force=True)  # closing: whatever waits goes

    assert [len(w) for w in memory.writes] == [1, 19, 1]
    assert [e.data["counts"]["a"]["completed"] for e in publisher.events] == [1, 20]
    assert not keeper.ledger.pending and keeper._due_at() is None


async def test_an_outcome_wakes_the_loop_only_when_it_sleeps_past_what_is_due(
    clock: Clock,
) -> None:
    keeper, _, _ = _keeper()
    keeper._wake_at = clock.now + 1.0  # idle: asleep until the stats refresh
    _outcome(keeper)
    assert keeper._wake.is_set()  # due now: woken

    keeper._wake.clear()
    await keeper._flush()  # written and announced at once
    clock.now += 0.01
    _outcome(keeper)
    assert keeper._due_at() == 1_000.0 + FLUSH_INTERVAL_S
    assert keeper._wake.is_set()  # the loop slept for the stats refresh still
    keeper._wake.clear()
    keeper._wake_at = 1_000.0 + FLUSH_INTERVAL_S  # now it sleeps until the records are due
    _outcome(keeper)
    assert not keeper._wake.is_set()  # it wakes in time for this one anyway
