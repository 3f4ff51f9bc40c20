"""A head fit runs beside the router's index upkeep: while one runs (seconds at a hundred
agents), the routing records of the tasks routed meanwhile are still written and the texts
they teach still learned, instead of waiting for the fit to end."""

from __future__ import annotations

import asyncio
import os

import pytest

from mesh.access.roles import Role
from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.router import keeper as keeper_module
from mesh.router.fits import FitProcess
from mesh.services import start_registry, start_worker
from mesh.worker.agent import Agent
from tests.conftest import wait_until
from tests.integration.routing_kit import SemanticMesh, agent

pytestmark = pytest.mark.integration

AGENTS = [
    agent("refunds", "Handles returns and refunds of purchased products.", ["money back"]),
    agent("logistics", "Tracks parcels and deliveries.", ["where is my package"]),
    agent("presales", "Answers questions before a purchase.", ["is the blue one in stock"]),
]


async def test_records_are_written_and_texts_learned_while_a_fit_runs(
    mesh: SemanticMesh, conn: MeshConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    await mesh.start(*AGENTS)
    assert mesh.selector is not None
    keeper = mesh.selector.keeper
    index = mesh.selector.index
    # the fits of the agents joining are over (one ending now would clear the change below)
    await wait_until(lambda: keeper._fit_task is None and not index.dirty, timeout=30)
    began, release = asyncio.Event(), asyncio.Event()

    async def long_fit(full: bool = True) -> float:
        began.set()
        await release.wait()  # a fit that lasts until the test is done looking
        return 0.0

    monkeypatch.setattr(keeper.refitter, "refit", long_fit)
    keeper.refitter.changed()
    keeper.refitter.changed_at -= 1.0  # the index settled: a fit is due at once
    index.dirty = True
    keeper._wake.set()
    await asyncio.wait_for(began.wait(), timeout=10)
    try:
        learned = keeper.learned_here
        async with MeshClient(conn) as client:
            done = await client.request("my parcel never arrived", wait_s=20)
        assert done.status == "completed" and done.agent_id == "logistics"
        record = conn.keys.outcome(done.task_id)
        assert await wait_until(lambda: conn.redis.hget(record, "agent_id"), timeout=10) == (
            b"logistics"
        )
        await wait_until(lambda: keeper.learned_here > learned, timeout=10)
        assert not release.is_set()  # all of it while the fit still ran
    finally:
        release.set()


async def test_a_routers_head_is_fitted_in_its_fit_process(mesh: SemanticMesh) -> None:
    await mesh.start(*AGENTS)
    assert mesh.selector is not None
    keeper = mesh.selector.keeper
    index = mesh.selector.index
    await wait_until(lambda: keeper._fit_task is None and not index.dirty, timeout=30)
    runner = keeper.refitter.runner
    assert isinstance(runner, FitProcess)
    fits, cpu_s, started = keeper.fits, keeper.fit_cpu_s, runner.started
    keeper.refitter.changed(registration=True)  # a full fit is due: in the fit process
    keeper.refitter.changed_at -= 1.0
    index.dirty = True
    keeper._wake.set()
    await wait_until(lambda: keeper.fits > fits and keeper._fit_task is None, timeout=30)
    assert index.fitted
    assert runner.started >= max(started, 1) and runner.pid not in (None, os.getpid())
    assert keeper.fit_cpu_s > cpu_s  # the child's CPU, counted in the router's budget


async def test_a_router_started_while_agents_register_fits_them_all_at_once(
    mesh: SemanticMesh, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a pause of 3 s ends the arrivals here (1 s by default): a loaded machine's
    # registrations 0.2 s apart stay one wave
    monkeypatch.setattr(keeper_module, "ARRIVALS_QUIET_S", 3.0)
    monkeypatch.setattr(keeper_module, "ARRIVALS_WAIT_S", 30.0)
    mesh.stops.append(await start_registry(await mesh.connection_of(Role("registry"))))

    async def join(a: Agent) -> None:
        conn = await mesh.connection_of(Role("worker", a.agent_id))
        mesh.stops.append(await start_worker(conn, a, grace_s=2))

    first, *later = AGENTS
    await join(first)

    async def arrive() -> None:
        for a in later:
            await asyncio.sleep(0.2)
            await join(a)

    arriving = asyncio.create_task(arrive())
    selector = await mesh.start_router()
    await arriving
    keeper = selector.keeper
    # the router's first fit, made before it serves, took in the agents still registering:
    # one fit of all three, none due after it
    assert set(selector.index.ids) == {a.agent_id for a in AGENTS}
    assert selector.index.fitted and not selector.index.dirty
    assert keeper.fits == 1 and keeper.refitter.full_fits == 1
