"""Standard AMQP RPC: a client that follows any RabbitMQ RPC tutorial gets its Result.

The client below is a separate Python process that imports only aio-pika and json: it sets
the AMQP ``reply_to`` and ``correlation_id`` properties, never the body's ``reply_to``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest

from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.schemas import TaskEnvelope
from mesh.worker.agent import Agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration

PLAIN_CLIENT = r"""
import asyncio, json, sys
import aio_pika

async def main(url, ns, body_reply):
    conn = await aio_pika.connect(url)
    async with conn:
        ch = await conn.channel()
        replies = await ch.declare_queue("", exclusive=True)
        ingress = await ch.get_exchange(ns + ".ingress")
        out = []
        for i, (cid, body) in enumerate([
            ("rpc-1", {"capability": "echo", "target": "echo", "payload": {"n": 1}}),
            ("rpc-2", {"capability": "echo", "target": "echo", "payload": {"n": 2}}),
            ("rpc-bad", {"capability": "echo", "priority": 99}),
        ]):
            if body_reply and i == 0:
                body["reply_to"] = body_reply
            await ingress.publish(
                aio_pika.Message(json.dumps(body).encode(), reply_to=replies.name,
                                 correlation_id=cid, content_type="application/json"),
                routing_key="task",
            )
        want = 2 if body_reply else 3
        async with replies.iterator(timeout=20) as it:
            async for message in it:
                async with message.process():
                    result = json.loads(message.body)
                    out.append({"correlation_id": message.correlation_id,
                                "status": result["status"],
                                "output": result.get("output"),
                                "code": (result.get("error") or {}).get("code")})
                if len(out) == want:
                    break
        print(json.dumps(out))

asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else ""))
"""


def _echo_agent() -> Agent:
    agent = Agent("echo", "echoes its payload")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: Any) -> dict[str, Any]:
        return dict(task.payload)

    return agent


async def _plain_client(settings: Settings, *extra: str) -> list[dict[str, Any]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        PLAIN_CLIENT,
        settings.amqp_urls[0].get_secret_value(),
        settings.namespace,
        *extra,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert proc.returncode == 0, err.decode()
    return list(json.loads(out))


async def test_a_plain_rpc_client_gets_its_results_with_its_correlation_ids(
    conn: MeshConnection, add_cleanup: Any, settings: Settings
) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, _echo_agent())
    results = {r["correlation_id"]: r for r in await _plain_client(settings)}
    assert results["rpc-1"] == {
        "correlation_id": "rpc-1",
        "status": "completed",
        "output": {"n": 1},
        "code": None,
    }
    assert results["rpc-2"]["output"] == {"n": 2}
    # an invalid envelope is answered on the property reply_to too, with the error
    assert results["rpc-bad"]["status"] == "failed"
    assert results["rpc-bad"]["code"] == "invalid_envelope"


async def test_the_body_reply_to_wins_over_the_property(
    conn: MeshConnection, add_cleanup: Any, settings: Settings
) -> None:
    await start_router(conn, add_cleanup)
    await start_worker(conn, add_cleanup, _echo_agent())
    channel = await conn.channel()
    add_cleanup(channel.close)
    elsewhere = await channel.declare_queue(f"{settings.namespace}.elsewhere", exclusive=True)
    results = await _plain_client(settings, elsewhere.name)
    # the first task named its own queue in the body: its Result went there, not to the
    # property's queue, still carrying the caller's correlation_id
    assert sorted(r["correlation_id"] for r in results) == ["rpc-2", "rpc-bad"]
    got: list[Any] = []

    async def arrived() -> bool:
        message = await elsewhere.get(no_ack=True, fail=False)
        if message is not None:
            got.append(message)
        return bool(got)

    await wait_until(arrived, timeout=10)
    (message,) = got
    assert message.correlation_id == "rpc-1"
    assert json.loads(message.body)["output"] == {"n": 1}
