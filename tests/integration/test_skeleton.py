"""The walking skeleton on the real broker: request -> router -> worker -> Result."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import pytest

from mesh import Agent, MeshClient, TaskContext, WorkerRuntime
from mesh.connection import MeshConnection
from mesh.router.service import RouterService
from mesh.schemas import Result, TaskEnvelope, decode
from mesh.schemas.codec import dumps, loads

pytestmark = pytest.mark.integration


def echo_agent(agent_id: str = "echo") -> Agent:
    agent = Agent(agent_id, "Echoes the payload back")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"echo": task.payload, "by": ctx.instance_id}

    return agent


async def start_mesh(
    conn: MeshConnection, *agents: Agent
) -> tuple[RouterService, list[WorkerRuntime]]:
    router = RouterService(conn)
    await router.start()
    workers = []
    for agent in agents:
        worker = WorkerRuntime(agent, conn)
        await worker.start()
        workers.append(worker)
    return router, workers


async def test_round_trip_through_router_and_worker(conn: MeshConnection, add_cleanup: Any) -> None:
    router, workers = await start_mesh(conn, echo_agent())
    add_cleanup(router.close)
    add_cleanup(workers[0].drain)
    async with MeshClient(conn) as client:
        result = await client.request("echo this", {"n": 1}, target="echo", wait_s=10)
    assert result.status == "completed"
    assert result.output == {"echo": {"n": 1}, "by": workers[0].instance_id}
    assert result.agent_id == "echo"


async def test_unknown_target_is_unroutable_and_dead_lettered(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    router, _ = await start_mesh(conn)
    add_cleanup(router.close)
    async with MeshClient(conn) as client:
        result = await client.request("anything", target="nobody-home", wait_s=10)
    assert result.status == "unroutable"
    assert result.error is not None and result.error.code == "unknown_target"
    assert "'nobody-home' is no agent of this mesh" in result.error.message
    channel = await conn.channel()
    queue = await channel.get_queue(conn.topology.dead_queue("unroutable"), ensure=False)
    message = await _get(queue)
    assert decode(TaskEnvelope, message.body).task_id == result.task_id
    assert message.headers["x-mesh-reason"] == "unroutable"


async def _get(queue: aio_pika.abc.AbstractQueue, timeout: float = 5.0) -> Any:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        message = await queue.get(no_ack=True, fail=False)
        if message is not None:
            return message
        await asyncio.sleep(0.02)
    raise AssertionError(f"nothing arrived in {queue.name} within {timeout}s")


async def test_invalid_envelope_answered_and_dead_lettered(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    router, _ = await start_mesh(conn)
    add_cleanup(router.close)
    channel = await conn.channel()
    reply = await channel.declare_queue(exclusive=True)
    body = dumps(
        {
            "task_id": "bad-1",
            "capability": 42,
            "priority": 99,
            "bogus": True,
            "reply_to": reply.name,
        }
    )
    ingress = await channel.get_exchange(conn.topology.ingress, ensure=False)
    await ingress.publish(aio_pika.Message(body), routing_key=conn.topology.ingress_key)

    answer = decode(Result, (await _get(reply)).body)
    assert answer.status == "failed" and answer.task_id == "bad-1"
    assert answer.error is not None and answer.error.code == "invalid_envelope"
    locs = {e["loc"] for e in answer.error.details["errors"]}
    assert {"capability", "priority", "bogus"} <= locs

    dead = await _get(await channel.get_queue(conn.topology.dead_queue("invalid"), ensure=False))
    assert dead.body == body
    assert dead.headers["x-mesh-reason"] == "invalid"
    assert "priority" in dead.headers["x-mesh-details"]

    # the router keeps running: a good task still goes through
    worker = WorkerRuntime(echo_agent(), conn)
    await worker.start()
    add_cleanup(worker.drain)
    async with MeshClient(conn) as client:
        ok = await client.request("still alive?", target="echo", wait_s=10)
    assert ok.status == "completed"
    assert loads(dead.headers["x-mesh-details"])["errors"]
