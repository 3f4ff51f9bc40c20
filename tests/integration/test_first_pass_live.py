"""A live router with the first pass of large meshes (`mesh.router.firstpass`) on: the fit
that computes its basis runs in the fit process like any other, and the tasks reach the
right agents over the broker, each decision reading one exact row.

A mesh of 2,048 agents is out of a test's reach: the test lowers the size the first pass
starts at to 2 agents and keeps one row, its narrowest setting.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from tests.conftest import wait_until
from tests.integration.routing_kit import EventTap, SemanticMesh, agent

pytestmark = pytest.mark.integration

AGENTS = (
    agent(
        "refunds",
        "Handles returns, refunds and exchanges of purchased products. Needs an order id.",
        ["I want to return the phone I bought last month", "can I get my money back"],
    ),
    agent(
        "weather",
        "Gives weather forecasts: rain, temperature and wind for a city and a day.",
        ["will it rain in Paris tomorrow", "how cold is it in Oslo this weekend"],
    ),
    agent(
        "translate",
        "Translates words and sentences between languages.",
        ["how do I say thank you in Japanese", "translate good morning into Spanish"],
    ),
)
ASKED = {
    "refunds": "I want to return the shoes I bought, can I get my money back",
    "weather": "will it rain in Berlin tomorrow",
    "translate": "how do I say good night in German",
}


async def test_a_live_router_routes_through_the_first_pass(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(*AGENTS)
    selector = mesh.selector
    assert selector is not None
    keeper, index = selector.keeper, selector.index
    await wait_until(lambda: keeper._fit_task is None and not index.dirty, timeout=30)
    assert index._first.basis is None  # 3 agents: below the default size, no basis fitted
    fits = keeper.fits
    index.fit_config = dataclasses.replace(index.fit_config, first_pass_agents=2, first_pass_rows=1)
    index.dirty = True  # the keeper's next round fits again, now with a basis
    keeper._wake.set()
    await wait_until(lambda: keeper.fits > fits and keeper._fit_task is None, timeout=60)
    assert index.first_pass and index.fitted

    tap = await EventTap(conn, "route.decision").start()
    async with MeshClient(conn) as client:
        results = {want: await client.request(text, wait_s=30) for want, text in ASKED.items()}
    for want, result in results.items():
        assert result.status == "completed", result
        assert result.agent_id == want and result.output == {"by": want}
    for want, result in results.items():
        event = await wait_until(
            lambda r=result: next((e for e in tap.events if e.task_id == r.task_id), None),
            timeout=10,
        )
        similarity = {c["agent_id"]: c["similarity"] for c in event.data["candidates"]}
        # one row was kept and scored: the other agents were never candidates
        assert similarity[want] > 0
        assert all(s == -1 for a, s in similarity.items() if a != want), similarity
    # a full pass over the same index chooses the same agents
    for want, text in ASKED.items():
        vector = selector.embedder.embed([text])[0]
        first = index.rank(vector, text)
        assert len(np.unique(first)) < len(first)  # the rows left out share one floor
        index.fit_config = dataclasses.replace(index.fit_config, first_pass_agents=0)
        full = index.rank(vector, text)
        index.fit_config = dataclasses.replace(index.fit_config, first_pass_agents=2)
        assert index.ids[int(np.argmax(full))] == want
