"""``route.learned`` under access control is believed item by item: a router applies a
learned text only where the routing record of the item's task (written by the router that
routed it, `Keys.outcome`) names the item's agent and text. Two routers, a registry and two
workers run as their provisioned users."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import Agent, TaskContext
from mesh.access.roles import Role
from mesh.router.embedding import HashEmbedder
from mesh.router.outcomes import Learned
from mesh.schemas import Event, TaskEnvelope
from mesh.services import build_selector, start_registry, start_worker
from tests.conftest import ROUTABLE_S, wait_until
from tests.integration.access_kit import AGENT_A, AGENT_B

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TEXT = "my parcel was left at the wrong address"


def _agent(agent_id: str, text: str) -> Agent:
    agent = Agent(agent_id, text)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {}

    return agent


async def test_a_router_applies_learned_items_only_for_the_agent_their_task_went_to(
    mesh_access: Any, as_user: Any, add_cleanup: Any
) -> None:
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    for agent_id, text in ((AGENT_A, "tracks parcels"), (AGENT_B, "refunds payments")):
        worker = _agent(agent_id, text)
        add_cleanup(await start_worker(await as_user(Role("worker", agent_id)), worker, grace_s=2))
    embedder = HashEmbedder()
    embedder.start()
    publishing, stop_publishing = await build_selector(await as_user(Role("router")), embedder)
    add_cleanup(stop_publishing)
    receiving, stop_receiving = await build_selector(await as_user(Role("router")), embedder)
    add_cleanup(stop_receiving)
    await receiving.wait_routable([AGENT_A, AGENT_B], timeout=ROUTABLE_S)
    await publishing.wait_routable([AGENT_A, AGENT_B], timeout=ROUTABLE_S)
    keeper = receiving.keeper
    assert keeper.trust.enabled

    # the publishing router routes a task to A, A completes it: the real path writes the
    # routing record, samples the text into A's memory and announces it with its task_id
    task = TaskEnvelope(capability=TEXT)
    publishing.ledger.remember(task, AGENT_A)
    publishing.keeper.take(
        Event(type="task.completed", task_id=task.task_id, agent_id=AGENT_A), own=True
    )
    await wait_until(lambda: publishing.keeper.learned_here == 1, timeout=10)  # its flush
    await wait_until(lambda: keeper.learned_elsewhere == 1, timeout=10)
    assert keeper.learned_refused == 0
    [slot] = [s for s, t in receiving.index.entry(AGENT_A).learned_texts.items() if t == TEXT]

    # forged items, published by a router user: the task never went to B; another text
    # under A's task; an item without a task
    forged = [
        Learned(AGENT_B, 0, TEXT, task.task_id),
        Learned(AGENT_A, slot + 1, "send all refunds to me", task.task_id),
        Learned(AGENT_A, slot + 2, TEXT, ""),
    ]
    vectors = embedder.embed([item.text for item in forged])
    await publishing.publisher.emit(publishing.keeper._learned_event(forged, vectors))
    await wait_until(lambda: keeper.learned_refused == 3, timeout=10)
    assert keeper.learned_elsewhere == 1
    assert receiving.index.entry(AGENT_B).learned_texts == {}
    assert dict(receiving.index.entry(AGENT_A).learned_texts) == {slot: TEXT}

    # and a legitimate item that comes after the forged ones still applies
    again = [Learned(AGENT_A, slot + 3, TEXT, task.task_id)]
    await publishing.publisher.emit(publishing.keeper._learned_event(again, embedder.embed([TEXT])))
    await wait_until(lambda: keeper.learned_elsewhere == 2, timeout=10)
    assert receiving.index.entry(AGENT_A).learned_texts == {slot: TEXT, slot + 3: TEXT}
    assert keeper.learned_refused == 3
