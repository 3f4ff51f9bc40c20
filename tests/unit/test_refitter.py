"""`Refitter`: fits only what changed, within the budget, once for the mesh."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import numpy as np
import pytest

from mesh.config import Settings
from mesh.errors import FitInterrupted
from mesh.messaging import Publisher
from mesh.router.fits import Fit, InlineFits
from mesh.router.fitting import FitConfig, FitJob, fit_member, fit_outputs, fit_snapshot
from mesh.router.index import CapabilityIndex
from mesh.router.refitter import SETTLE_S, Refitter
from mesh.schemas import Event, decode, encode

DIM = 16
AGENTS = ("a", "b", "c")


class Events:
    """A stand-in publisher: keeps what is emitted (through the codec, as on the wire)."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    async def emit(self, event: Event) -> None:
        self.events.append(decode(Event, encode(event)))


def _index() -> CapabilityIndex:
    rng = np.random.default_rng(3)
    index = CapabilityIndex(DIM, fit=FitConfig(steps=20, hidden=8, members=2))
    for agent_id in AGENTS:
        vectors = rng.normal(size=(4, DIM)).astype(np.float32)
        index.add(agent_id, vectors[0], vectors[1:])
    return index


def _refitter(own_id: str, index: CapabilityIndex, events: Events) -> Refitter:
    return Refitter(
        index,
        cast(Publisher, events),
        Settings(refit_cpu_share=0.1),
        runner=InlineFits(),
        own_id=own_id,
        model_id="m",
        registered={a: ("reg", a) for a in AGENTS},
    )


def _learn(index: CapabilityIndex, refitter: Refitter, slot: int) -> None:
    vec = np.random.default_rng(slot).normal(size=DIM).astype(np.float32)
    assert index.learn_at("a", slot, vec, f"text {slot}")
    refitter.changed()


def test_the_other_router_installs_the_fit_and_defers_to_its_fitter() -> None:
    events = Events()
    first_index, other_index = _index(), _index()
    first = _refitter("router-1", first_index, events)
    other = _refitter("router-2", other_index, Events())
    asyncio.run(first.refit())
    assert first.fits == 1 and first.full_fits == 1 and not first_index.dirty
    assert [e.type for e in events.events] == ["route.fitted"]
    other_index.dirty = True
    for event in events.events:
        other.take(event)
    assert other.fits_received == 1 and other.fits == 0
    assert not other_index.dirty
    query = np.random.default_rng(9).normal(size=DIM).astype(np.float32)
    np.testing.assert_allclose(first_index.rank(query), other_index.rank(query), rtol=1e-6)
    _learn(other_index, other, 0)
    assert other.plan(other.changed_at + SETTLE_S + 1) is None  # router-1 fits for the mesh


def test_the_fitter_keeps_its_own_changes_when_a_router_that_defers_to_it_fitted() -> None:
    """A fit that began elsewhere before a text this router learned does not cover it: the
    router the others defer to installs the head and fits its changes itself."""
    events = Events()
    first_index, other_index = _index(), _index()
    first = _refitter("router-1", first_index, Events())
    other = _refitter("router-2", other_index, events)
    asyncio.run(first.refit())
    asyncio.run(other.refit())  # router-2 fitted too (it had not heard from router-1 yet)
    _learn(first_index, first, 0)  # router-1 learned a text after router-2's fit began
    for event in events.events:
        first.take(event)
    assert first.fits_received == 1
    assert first_index.dirty  # still to be fitted here
    assert first.plan(first.changed_at + SETTLE_S) is True


def test_a_settled_index_gets_a_full_fit_a_changing_one_its_output_layer() -> None:
    index = _index()
    refitter = _refitter("router-1", index, Events())
    asyncio.run(refitter.refit())
    assert refitter.plan(refitter.changed_at + 10) is None  # nothing changed
    _learn(index, refitter, 0)
    now = refitter.changed_at
    assert refitter.plan(now) is None  # still changing, and a fit ran less than 5 s ago
    assert refitter.plan(now + SETTLE_S) is True  # settled: a full fit
    refitter.changed_at = now + 6.0  # still changing 6 s later: the output layer
    assert refitter.plan(now + 6.0) is False
    asyncio.run(refitter.refit(False))
    assert (refitter.fits, refitter.full_fits) == (2, 1)
    refitter.changed(registration=True)
    index.dirty = True
    later = refitter.changed_at + 6.0
    refitter.changed_at = later  # still changing, but a registration: a full fit
    assert refitter.plan(later) is True
    asyncio.run(refitter.refit(True))
    assert (refitter.fits, refitter.full_fits) == (3, 2)


def test_no_fit_past_the_budget_of_the_minute() -> None:
    index = _index()
    refitter = _refitter("router-1", index, Events())
    asyncio.run(refitter.refit())
    refitter.budget.record(refitter.changed_at, refitter.budget.limit_s)  # the minute is spent
    _learn(index, refitter, 1)
    assert refitter.plan(refitter.changed_at + SETTLE_S) is None
    assert refitter.plan(refitter.changed_at + 61.0) is True


class ChangingFits(InlineFits):
    """Fits in the caller's thread, each of which sees a change arrive as it starts (the
    load came back); `asked` says what each fit then did (gave way or ran on)."""

    def __init__(self) -> None:
        super().__init__()
        self.refitter: Refitter | None = None
        self.asked: list[str] = []

    def run(self, job: FitJob, ticket: int) -> Fit:
        assert self.refitter is not None
        self.refitter.changed()
        result, cpu_s = super().run(job, ticket)
        self.asked.append("runs" if result is not None else "yields")
        return result, cpu_s


def _changing_during_fits(refitter: Refitter) -> list[str]:
    runner = ChangingFits()
    runner.refitter = refitter
    refitter.runner = runner
    return runner.asked


def test_a_fit_of_the_settled_index_gives_way_when_the_load_comes_back() -> None:
    index = _index()
    refitter = _refitter("router-1", index, Events())
    asyncio.run(refitter.refit())  # the first head: nothing yields
    assert refitter.fits == 1 and refitter.fits_yielded == 0
    _learn(index, refitter, 1)
    asked = _changing_during_fits(refitter)
    refitter.changed_at -= SETTLE_S  # the index settled: the fit is for an idle router
    cpu_before = refitter.fit_cpu_s
    spent = asyncio.run(refitter.refit(True))
    assert asked == ["yields"]
    assert refitter.fits_yielded == 1 and refitter.fits == 1 and refitter.full_fits == 1
    assert index.dirty  # the changes wait for the next fit
    assert refitter.fit_cpu_s == cpu_before + spent  # what it spent counts in the budget
    # under load the output layer follows the changes; it never yields
    refitter.changed_at += 6.0  # still changing 6 s later
    assert refitter.plan(refitter.changed_at) is False
    asyncio.run(refitter.refit(False))
    assert refitter.fits == 2 and refitter.fits_yielded == 1


def test_a_fit_nothing_else_can_do_finishes_whatever_the_load() -> None:
    index = _index()
    refitter = _refitter("router-1", index, Events())
    asked = _changing_during_fits(refitter)
    asyncio.run(refitter.refit())  # no head yet
    refitter.changed(registration=True)
    refitter.changed_at -= SETTLE_S
    asyncio.run(refitter.refit(True))  # a registration changed
    assert asked == ["runs", "runs"]
    assert refitter.fits == 2 and refitter.fits_yielded == 0 and refitter.full_fits == 2


def test_a_member_fit_stops_at_the_step_it_is_asked_to_yield() -> None:
    rng = np.random.default_rng(5)
    x = rng.normal(size=(12, DIM)).astype(np.float32)
    y = np.arange(12) % 3
    asked = []

    def yields() -> bool:
        asked.append(1)
        return len(asked) > 7

    with pytest.raises(FitInterrupted, match="step 8 of 20"):
        fit_member(x, y, 3, FitConfig(steps=20, hidden=8), seed=0, yields=yields)
    assert fit_member(x, y, 3, FitConfig(steps=20, hidden=8), seed=0, yields=lambda: False)


def test_fit_outputs_keeps_the_hidden_layers_and_refits_every_agents_row() -> None:
    rng = np.random.default_rng(4)
    cfg = FitConfig(steps=40, hidden=8, members=2)
    agents = {a: i for i, a in enumerate(AGENTS)}
    caps = [rng.normal(size=DIM).astype(np.float32) for _ in AGENTS]
    reqs = [rng.normal(size=(5, DIM)).astype(np.float32) for _ in AGENTS]
    previous = fit_snapshot(1, agents, caps, reqs, DIM, cfg)
    assert previous.head is not None
    more: dict[str, Any] = {**agents, "d": 9}
    result = fit_outputs(2, more, [*reqs, reqs[0]], [*caps, caps[0]], previous, cfg)
    assert result.head is not None
    assert result.head.weights.shape == (4, 16) and result.head.biases.shape == (4, 2)
    assert result.head.hidden_weights is previous.head.hidden_weights
    assert not np.allclose(result.head.weights[:3], previous.head.weights)
    np.testing.assert_array_equal(result.request_mean, previous.request_mean)
