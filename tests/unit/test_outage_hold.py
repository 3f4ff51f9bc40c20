"""`held_through_outages`: an outage holds a delivery and tries it again in place (as a
redelivery) while its channel is open and its hold lasts; anything else is not its business."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
import redis.exceptions

from mesh.wire import OutageBackoff, held_through_outages


class FakeMessage:
    """What the hold reads of a delivery: its channel, open or closed."""

    def __init__(self) -> None:
        self.channel = SimpleNamespace(is_closed=False)


def fast_backoff() -> OutageBackoff:
    return OutageBackoff(first_s=0.001, max_s=0.002)


def failing(times: int, *, then: Any = None) -> tuple[list[bool], Any]:
    """An attempt that meets an outage `times` times, then returns; records `again`."""
    calls: list[bool] = []

    async def attempt(again: bool) -> None:
        calls.append(again)
        if len(calls) <= times:
            raise redis.exceptions.ConnectionError("Redis is away")
        if then is not None:
            then()

    return calls, attempt


async def test_an_outage_is_retried_in_place_as_a_redelivery_until_it_ends() -> None:
    calls, attempt = failing(3)
    backoff = fast_backoff()
    await held_through_outages(attempt, FakeMessage(), backoff, what="tasks")
    assert calls == [False, True, True, True]
    assert backoff.outages == 0  # the success reset it


async def test_a_delivery_without_an_outage_is_tried_once() -> None:
    calls, attempt = failing(0)
    await held_through_outages(attempt, FakeMessage(), fast_backoff(), what="tasks")
    assert calls == [False]


async def test_the_outage_is_raised_once_the_hold_is_spent() -> None:
    calls, attempt = failing(10_000)
    with pytest.raises(redis.exceptions.ConnectionError):
        await held_through_outages(
            attempt,
            FakeMessage(),
            fast_backoff(),
            what="tasks",
            hold_s=0.05,
        )
    assert 2 <= len(calls) < 10_000 and calls[0] is False and all(calls[1:])


async def test_a_closed_channel_raises_at_once_for_the_broker_to_redeliver() -> None:
    message = FakeMessage()
    message.channel.is_closed = True
    calls, attempt = failing(5)
    with pytest.raises(redis.exceptions.ConnectionError):
        await held_through_outages(attempt, message, fast_backoff(), what="tasks")
    assert calls == [False]


async def test_a_channel_closed_during_the_pause_is_not_tried_again() -> None:
    message = FakeMessage()

    async def attempt(again: bool) -> None:
        assert not again, "tried again on a closed channel"
        asyncio.get_running_loop().call_soon(setattr, message.channel, "is_closed", True)
        raise redis.exceptions.ConnectionError("Redis is away")

    with pytest.raises(redis.exceptions.ConnectionError):
        await held_through_outages(attempt, message, fast_backoff(), what="tasks")


async def test_a_bug_is_not_held() -> None:
    calls: list[bool] = []

    async def attempt(again: bool) -> None:
        calls.append(again)
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        await held_through_outages(attempt, FakeMessage(), fast_backoff(), what="tasks")
    assert calls == [False]
