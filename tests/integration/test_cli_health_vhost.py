"""`mesh health` counts the consumers of the vhost ``MESH_AMQP_URL`` opens."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aio_pika
import pytest
from pydantic import SecretStr

from mesh.cli.health import check
from mesh.config import Settings
from mesh.connection import connect
from mesh.management import Management

pytestmark = [pytest.mark.integration, pytest.mark.access_off("creates a vhost as guest")]


async def test_health_reads_the_queues_of_the_configured_vhost(
    settings: Settings, add_cleanup: Any, request: pytest.FixtureRequest
) -> None:
    vhost = f"test-{uuid.uuid4().hex[:10]}"
    management = Management(settings)
    await asyncio.to_thread(management.put_vhost, vhost)
    add_cleanup(lambda: asyncio.to_thread(management.delete_vhost, vhost))
    await asyncio.to_thread(
        management.put_permissions, vhost, "guest", configure=".*", write=".*", read=".*"
    )
    base = settings.amqp_urls[0].get_secret_value().rstrip("/")
    in_vhost = settings.model_copy(update={"amqp_url": SecretStr(f"{base}/{vhost}")})
    conn = await connect(in_vhost, name=request.node.nodeid)
    add_cleanup(conn.close)
    channel = await conn.channel()
    add_cleanup(channel.close)
    await conn.topology.declare(channel)
    queue = await channel.get_queue(conn.topology.router_queue, ensure=False)

    async def ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        await message.nack(requeue=True)

    await queue.consume(ignore)  # a stand-in router: one consumer in that vhost

    # asked of the broker in that vhost (a passive declare): at once
    assert (await check(conn, "router", None, None)).endswith(conn.topology.router_queue)
