"""`BandGate`: the agent's slots shared by its priority bands, 5:3:1 when contended."""

from __future__ import annotations

import asyncio

import pytest

from mesh.worker.bands import BandGate


async def test_one_band_alone_gets_every_slot_and_no_more() -> None:
    gate = BandGate(4, [5, 3, 1])
    for _ in range(4):
        await gate.acquire(1)
    assert gate.running == 4
    fifth = asyncio.create_task(gate.acquire(1))
    await asyncio.sleep(0)
    assert not fifth.done() and gate.waiting == 1
    gate.release()
    await fifth
    assert gate.running == 4 and gate.waiting == 0


async def test_contended_slots_go_to_bands_by_weight() -> None:
    gate = BandGate(1, [5, 3, 1])
    await gate.acquire(0)
    order: list[int] = []

    async def wait(band: int) -> None:
        await gate.acquire(band)
        order.append(band)

    waiters = [asyncio.create_task(wait(b)) for b in (0, 1, 2) for _ in range(9)]
    await asyncio.sleep(0)
    for _ in range(9):
        gate.release()
        await asyncio.sleep(0)
    assert sorted(order) == [0] * 5 + [1] * 3 + [2]
    for task in waiters:
        task.cancel()
    await asyncio.gather(*waiters, return_exceptions=True)


async def test_a_cancelled_waiter_passes_its_slot_on() -> None:
    gate = BandGate(1, [1])
    await gate.acquire(0)
    first = asyncio.create_task(gate.acquire(0))
    second = asyncio.create_task(gate.acquire(0))
    await asyncio.sleep(0)
    first.cancel()
    gate.release()
    await second
    assert first.cancelled() and gate.running == 1 and gate.waiting == 0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        BandGate(0, [1])
    with pytest.raises(ValueError):
        BandGate(2, [])
