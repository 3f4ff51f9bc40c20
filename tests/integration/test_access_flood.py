"""One client cannot stop routing: a flood of invalid bodies at AMQP priority 10, with
every dead-letter queue full, costs the flooding user its own ingress budget and nothing
of anyone else's (access control, second round, point 2).

The dead queues of the provisioned mesh are capped (`DEAD_LETTER_CAP` bytes, reject-publish):
the flood fills ``dead.invalid`` at once; what the broker then refuses is dropped and
counted, never requeued; what the flooding user's budget cannot pay is refused before it
is decoded. Alice's requests beside it complete, and routing is back at once after it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.access.roles import Role
from mesh.connection import connect
from mesh.messaging import envelope_message
from mesh.router.service import RouterService
from mesh.schemas import Result, TaskEnvelope
from mesh.services import start_registry, start_worker
from tests.conftest import wait_until
from tests.integration.access_kit import AGENT_A, CLIENT, Provisioned, start_router_as

pytestmark = pytest.mark.integration

#: invalid bodies the flooding user sends, as fast as the broker takes them
FLOOD = 3_000
#: Alice's requests beside the flood
LEGIT = 100


async def test_a_flood_of_invalid_high_priority_bodies_into_full_dead_letters_stops_nothing(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    router_login = await as_user(Role("router"))
    budgeted = router_login.settings.model_copy(
        update={"ingress_rate_per_user": 200.0, "ingress_burst_s": 1.0}
    )
    router_conn = await connect(budgeted, name="access-router-budgeted")
    add_cleanup(router_conn.close)
    router = RouterService(router_conn)
    await router.start()
    add_cleanup(router.close)
    agent = Agent(AGENT_A, "Answers at once", max_concurrency=16)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"n": task.payload.get("n")}

    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), agent, grace_s=2))

    mallory = await as_user(Role("client", "mallory"))
    channel = await mallory.channel()
    ingress = await channel.get_exchange(mallory.topology.ingress, ensure=False)
    user = mesh_access.user(Role("client", "mallory"))

    async def flood() -> None:
        for i in range(FLOOD):
            body = b"not json " + str(i).encode() * 20
            message = aio_pika.Message(body, priority=10, user_id=user)
            await ingress.publish(message, routing_key=mallory.topology.ingress_key)

    async with MeshClient(await as_user(Role("client", CLIENT))) as alice:
        warm = await alice.request("go", {"n": -1}, target=AGENT_A, wait_s=20)
        assert warm.status == "completed"
        flooding = asyncio.ensure_future(flood())
        results = await asyncio.gather(
            *(alice.request("go", {"n": n}, target=AGENT_A, wait_s=60) for n in range(LEGIT))
        )
        await flooding
        completed = [r for r in results if r.status == "completed"]
        assert len(completed) >= 0.99 * LEGIT, [r.error for r in results if r.error][:3]
        assert (
            sorted(r.output["n"] for r in completed if r.output)
            == sorted(range(LEGIT))[: len(completed)]
            or len(completed) == LEGIT
        )

        # the flood cost its sender: refused by its budget, or dropped at the full queue
        dropped = router.publisher.dropped.get("invalid", 0)
        refused = router._intake.budget.refused.get(user, 0)
        assert refused > 0 and refused + dropped > 0

        # routing is back at once once the flood stops (no operator action)
        started = time.monotonic()
        after = await alice.request("go", {"n": 1_000}, target=AGENT_A, wait_s=20)
        assert after.status == "completed" and time.monotonic() - started < 5.0


async def test_an_ingress_message_above_its_envelopes_priority_is_refused(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    """The AMQP priority orders the router queue: a caller may not jump it past what its
    task says. Such a message is refused (answered on its own reply queue), and the same
    task at its own priority runs."""
    await start_router_as(as_user, add_cleanup)
    agent = Agent(AGENT_A, "Answers at once")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"ok": True}

    add_cleanup(await start_registry(await as_user(Role("registry"))))
    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), agent, grace_s=2))
    conn = await as_user(Role("client", CLIENT))
    seen: list[Result] = []
    async with MeshClient(conn, on_result=seen.append) as alice:
        sent = TaskEnvelope(capability="go", target=AGENT_A, priority=1, reply_to=alice.reply_to)
        message = envelope_message(sent)
        message.priority = 10  # the queue's top, for a task of priority 1
        message.user_id = mesh_access.user(Role("client", CLIENT))
        channel = await conn.channel()
        ingress = await channel.get_exchange(conn.topology.ingress, ensure=False)
        await ingress.publish(message, routing_key=conn.topology.ingress_key)
        await wait_until(lambda: any(r.task_id == sent.task_id for r in seen), timeout=10)
        [refused] = [r for r in seen if r.task_id == sent.task_id]
        assert refused.status == "failed"
        assert refused.error is not None and refused.error.code == "priority_above_envelope"
        fine = await alice.request("go", {}, target=AGENT_A, priority=1, wait_s=20)
        assert fine.status == "completed"
