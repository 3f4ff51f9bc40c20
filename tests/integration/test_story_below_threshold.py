"""Story: everything below the threshold (seed 002 section 4.3, degradation level 2).

No agent scores above the threshold and no fallback agent is configured: the task waits
for a person in ``<ns>.human``, the caller gets an interim ``queued_for_human`` Result at
once, a person lists, takes and answers it (`mesh human`), and the answer reaches the
caller's reply queue and the task's history. With a fallback agent configured the task
goes to it, as before; with ``MESH_HUMAN_QUEUE`` off it is unroutable (``no_fallback``).
Both queue modes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest

from mesh.access.roles import Role
from mesh.cli.human import answer, list_tasks, take
from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.dispatch.store import TaskStore
from mesh.errors import HumanTaskError
from mesh.router.embedding import Embedder
from mesh.schemas import TaskEnvelope, decode
from tests.integration.dispatch_kit import drain_queue, wait_for_messages
from tests.integration.routing_kit import SemanticMesh, agent

pytestmark = pytest.mark.integration

REFUNDS = agent(
    "refunds",
    "Handles returns, refunds and exchanges of purchased products. Needs an order id.",
    ["I want to return the phone I bought last month", "can I get my money back"],
)
HAIKU = "compose a haiku about the autumn moon"


@pytest.fixture(params=["classic", "quorum"])
def settings(namespace: str, request: pytest.FixtureRequest) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5, queue_type=request.param
    )


async def test_below_threshold_waits_for_a_person_who_answers_the_caller(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS)
    people = await mesh.connection_of(Role("router"))  # `mesh human` runs as the router
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    async with MeshClient(conn) as client:
        interim = await client.request(HAIKU, {"lines": 3}, wait_s=20)
        # the interim Result: handed to a person, why, and the best score
        assert interim.status == "queued_for_human"
        assert interim.error is not None and interim.error.code == "below_threshold"
        assert conn.topology.human in interim.error.message
        threshold = interim.error.details["threshold"]
        assert interim.error.details["best_agent"] == "refunds"
        assert interim.error.details["best_score"] < threshold
        assert interim.route is not None and interim.route.strategy == "human"
        # not terminal: nothing stored as the task's Result, nothing dead-lettered
        assert (await store.state(interim.task_id))["state"] == "queued_for_human"
        assert await store.stored_result(interim.task_id) is None
        assert await drain_queue(conn, conn.topology.dead_queue("unroutable")) == []

        listed = await list_tasks(people)
        assert interim.task_id in listed and HAIKU in listed
        assert f"{interim.error.details['best_score']:.3f}" in listed

        # one person takes it: nobody else may answer it then
        taken = await take(people, None, "alice")
        assert f"task {interim.task_id} is yours, alice" in taken
        with pytest.raises(HumanTaskError, match="taken by 'alice'"):
            await answer(people, interim.task_id, "bob", output={"haiku": "no"})

        text, done = await answer(people, interim.task_id, "alice", output={"haiku": "moon"})
        assert done.delivered and not done.missing
        assert f"sent to {client.reply_to}" in text
        final = await client.final_result(interim.task_id, wait_s=10)
    assert final.status == "completed" and final.output == {"haiku": "moon"}
    assert final.route is not None and final.route.strategy == "human"
    # the task's history holds the hand-over and the answer; the Result is stored
    history = await store.history(interim.task_id)
    states = [h["state"] for h in history]
    assert states[-2:] == ["queued_for_human", "completed"]
    assert history[-1]["by"] == "human:alice"
    stored = await store.stored_result(interim.task_id)
    assert stored is not None and stored.output == {"haiku": "moon"}
    assert interim.task_id not in await list_tasks(people)
    # the queue's copy was taken (acked) by `take`: the queue is empty again
    assert await drain_queue(conn, conn.topology.human) == []
    # answering again is refused: the task is done
    with pytest.raises(HumanTaskError):
        await answer(people, interim.task_id, "alice", output={})


async def test_an_answer_after_the_caller_left_is_kept_with_the_task(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(REFUNDS)
    people = await mesh.connection_of(Role("router"))
    async with MeshClient(conn) as client:
        interim = await client.request(HAIKU, wait_s=20)
    assert interim.status == "queued_for_human"
    # the copy in the human queue carries the task and why
    [copy] = await wait_for_messages(conn, conn.topology.human)
    assert decode(TaskEnvelope, copy.body).task_id == interim.task_id
    assert copy.headers["x-mesh-code"] == "below_threshold"
    # the caller closed its client (its reply queue is gone): taken by id, answered
    await take(people, interim.task_id, "carol")
    text, done = await answer(people, interim.task_id, "carol", output={"text": "an autumn moon"})
    assert done.missing and not done.delivered
    assert "is gone: the answer is kept with the task" in text
    stored = await TaskStore(conn.redis, conn.keys, conn.settings).stored_result(interim.task_id)
    assert stored is not None and stored.status == "completed"
    assert stored.output == {"text": "an autumn moon"}


async def test_with_a_fallback_agent_it_goes_to_the_fallback(
    embedder: Embedder, mesh_env: Callable[..., Awaitable[MeshConnection]]
) -> None:
    conn = await mesh_env("-fallback")
    conn.settings = conn.settings.model_copy(update={"fallback_agent": "helpdesk"})
    m = SemanticMesh(conn, embedder)
    try:
        await m.start(REFUNDS, agent("helpdesk", "General help desk."))
        async with MeshClient(conn) as client:
            r = await client.request(HAIKU, wait_s=20)
        assert r.status == "completed" and r.output == {"by": "helpdesk"}
        assert r.route is not None and r.route.strategy == "fallback"
        assert await list_tasks(conn) == f"nobody waits: {conn.topology.human} is empty"
    finally:
        await m.close()


async def test_with_the_human_queue_off_it_is_unroutable_and_says_why(
    embedder: Embedder, mesh_env: Callable[..., Awaitable[MeshConnection]]
) -> None:
    conn = await mesh_env("-off")
    conn.settings = conn.settings.model_copy(update={"human_queue": False})
    m = SemanticMesh(conn, embedder)
    try:
        await m.start(REFUNDS)
        async with MeshClient(conn) as client:
            r = await client.request(HAIKU, wait_s=20)
        assert r.status == "unroutable"
        assert r.error is not None and r.error.code == "no_fallback"
        assert "MESH_HUMAN_QUEUE" in r.error.message
        dead = await wait_for_messages(conn, conn.topology.dead_queue("unroutable"))
        assert [decode(TaskEnvelope, d.body).task_id for d in dead] == [r.task_id]
    finally:
        await m.close()
