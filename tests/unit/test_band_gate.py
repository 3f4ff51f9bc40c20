"""`BandGate`: a consumer's slots shared by its priority bands, by weight when contended."""

from __future__ import annotations

import asyncio

import pytest

from mesh.wire.bands import BandGate


async def contended_order(weights: list[int], slots: int, per_band: int) -> list[int]:
    """The bands served, in order, when `per_band` deliveries of every band wait for a gate
    of `slots` whose slots are all held, and the holders release one at a time."""
    gate = BandGate(slots, weights)
    for _ in range(slots):
        await gate.acquire(0)
    order: list[int] = []

    async def wait(band: int) -> None:
        await gate.acquire(band)
        order.append(band)

    waiters = [asyncio.create_task(wait(b)) for b in range(len(weights)) for _ in range(per_band)]
    await asyncio.sleep(0)
    for _ in range(per_band * len(weights)):
        gate.release()
        await asyncio.sleep(0)
    await asyncio.gather(*waiters)
    return order


async def test_one_band_alone_gets_every_slot_and_no_more() -> None:
    gate = BandGate(4, [5, 3, 1])
    for _ in range(4):
        await gate.acquire(1)
    assert gate.running == 4
    fifth = asyncio.create_task(gate.acquire(1))
    await asyncio.sleep(0)
    assert not fifth.done() and gate.waiting == 1 and gate.waiting_in(1) == 1
    gate.release()
    await fifth
    assert gate.running == 4 and gate.waiting == 0


async def test_contended_slots_go_to_bands_by_weight() -> None:
    order = await contended_order([5, 3, 1], 1, 27)
    # every nine slots while all three bands wait: 5 high, 3 normal, 1 low, interleaved
    for start in range(0, 27, 9):
        assert sorted(order[start : start + 9]) == [0] * 5 + [1] * 3 + [2]
    assert order[:9] == [0, 1, 0, 2, 0, 1, 0, 1, 0]


async def test_configured_weights_set_the_shares() -> None:
    order = await contended_order([1, 1, 1], 2, 10)
    assert order[:6].count(2) == 2  # equal weights: one in three
    order = await contended_order([8, 1, 1], 1, 20)
    assert order[:10].count(0) == 8 and order[:10].count(2) == 1


async def test_a_band_alone_is_served_in_arrival_order_and_the_others_catch_up() -> None:
    """Only the low band waits: it gets every slot (no slot is kept for a band that has
    nothing waiting); once high arrives it gets five slots of six."""
    gate = BandGate(1, [5, 3, 1])
    await gate.acquire(0)
    order: list[int] = []

    async def wait(band: int) -> None:
        await gate.acquire(band)
        order.append(band)

    low = [asyncio.create_task(wait(2)) for _ in range(12)]
    await asyncio.sleep(0)
    for _ in range(3):
        gate.release()
        await asyncio.sleep(0)
    assert order == [2, 2, 2]
    high = [asyncio.create_task(wait(0)) for _ in range(10)]
    await asyncio.sleep(0)
    for _ in range(6):
        gate.release()
        await asyncio.sleep(0)
    assert sorted(order[3:]) == [0] * 5 + [2]
    for task in low + high:
        task.cancel()
    await asyncio.gather(*low, *high, return_exceptions=True)


async def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    gate = BandGate(1, [1])
    await gate.acquire(0)
    first = asyncio.create_task(gate.acquire(0))
    second = asyncio.create_task(gate.acquire(0))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert gate.waiting == 1
    gate.release()
    await second
    assert first.cancelled() and gate.running == 1 and gate.waiting == 0


async def test_a_waiter_cancelled_as_it_is_served_hands_the_slot_over() -> None:
    gate = BandGate(1, [5, 1])
    await gate.acquire(0)
    first = asyncio.create_task(gate.acquire(0))
    second = asyncio.create_task(gate.acquire(1))
    await asyncio.sleep(0)
    gate.release()  # resolves first's future...
    first.cancel()  # ...which is cancelled before it resumes: its slot goes to second
    await asyncio.gather(first, return_exceptions=True)
    await second
    assert gate.running == 1 and gate.waiting == 0


async def test_the_slot_block_releases_on_error() -> None:
    gate = BandGate(1, [5, 3, 1])
    with pytest.raises(RuntimeError):
        async with gate.slot(2):
            assert gate.running == 1
            raise RuntimeError("boom")
    assert gate.running == 0 and gate.granted == [0, 0, 1]


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        BandGate(0, [1])
    with pytest.raises(ValueError):
        BandGate(2, [])
    with pytest.raises(ValueError):
        BandGate(2, [5, 0, 1])
