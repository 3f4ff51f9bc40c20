"""The raw aio-pika pipeline the load benchmark compares the mesh to: the same hops.

client -> ``<ns>.ingress`` (direct) -> ``<ns>.router.normal`` -> raw router ->
``<ns>.capabilities`` (topic) -> ``<ns>.agent.<id>.normal`` (dead-letter exchange) -> raw
worker -> the client's reply queue (default exchange): the load's tasks all have the default
priority, so the raw pipeline consumes only the normal band's queues. Names and queue
arguments come from `mesh.topology.Topology`, every envelope and Result is persistent and
published with a confirm before the consumed message is acked, and prefetches are the
mesh's (router: Settings.prefetch; worker: one channel per agent queue, prefetch 4).
No validation, Redis, registry, semantic choice or events except one ``route.decision``
per dispatch carrying ``timings.route_ms`` (consumed -> dispatch confirmed).

Usage (bench/load.py starts these)::

    python bench/raw_pipeline.py router --namespace raw-x --agents 0:100 --ready FILE
    python bench/raw_pipeline.py worker --namespace raw-x --agents 0:50 --ready FILE
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import aio_pika
import orjson
from aio_pika.abc import (
    AbstractChannel,
    AbstractExchange,
    AbstractIncomingMessage,
    AbstractRobustConnection,
    DeliveryMode,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load_agents import agent_ids, parse_slice  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.topology import DEFAULT_BAND, Topology, message_priority  # noqa: E402

JSON = "application/json"
WORKER_PREFETCH = 4


async def _channel(
    conn: AbstractRobustConnection, *, confirms: bool, prefetch: int | None = None
) -> AbstractChannel:
    channel = await conn.channel(publisher_confirms=confirms)
    if prefetch is not None:
        await channel.set_qos(prefetch_count=prefetch)
    return channel


class RawRouter:
    """Consumes the router queue, dispatches each envelope to its agent queue, acks."""

    def __init__(self, conn: AbstractRobustConnection, topology: Topology, ids: list[str]):
        self.conn = conn
        self.topology = topology
        self.ids = ids
        self._caps: AbstractExchange | None = None
        self._events: AbstractExchange | None = None

    async def start(self, prefetch: int) -> None:
        consume = await _channel(self.conn, confirms=False, prefetch=prefetch)
        await self.topology.declare(consume)
        confirmed = await _channel(self.conn, confirms=True)
        fast = await _channel(self.conn, confirms=False)
        self._caps = await confirmed.get_exchange(self.topology.capabilities, ensure=False)
        self._events = await fast.get_exchange(self.topology.events, ensure=False)
        queue = await consume.get_queue(self.topology.router_queue, ensure=False)
        await queue.consume(self._on_message)

    def _agent_for(self, envelope: dict[str, Any]) -> str:
        target = envelope.get("target")
        if target:
            return str(target)
        return self.ids[zlib.crc32(str(envelope["task_id"]).encode()) % len(self.ids)]

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        assert self._caps is not None and self._events is not None
        consumed = time.perf_counter()
        envelope = orjson.loads(message.body)
        agent = self._agent_for(envelope)
        envelope["hops"] = int(envelope.get("hops", 0)) + 1
        await self._caps.publish(
            aio_pika.Message(
                orjson.dumps(envelope),
                content_type=JSON,
                delivery_mode=DeliveryMode.PERSISTENT,
                priority=message_priority(int(envelope.get("priority", 5))),
                message_id=envelope["task_id"],
            ),
            routing_key=self.topology.agent_routing_key(agent),
            mandatory=True,
        )
        route_ms = (time.perf_counter() - consumed) * 1000
        await message.ack()
        event = {
            "type": "route.decision",
            "task_id": envelope["task_id"],
            "agent_id": agent,
            "data": {"timings": {"route_ms": round(route_ms, 3)}},
        }
        await self._events.publish(
            aio_pika.Message(orjson.dumps(event), content_type=JSON), routing_key=event["type"]
        )


class RawWorker:
    """Consumes agent queues (a channel each) and answers every envelope with a Result."""

    def __init__(self, conn: AbstractRobustConnection, topology: Topology, ids: list[str]):
        self.conn = conn
        self.topology = topology
        self.ids = ids
        self._reply: AbstractExchange | None = None

    async def start(self) -> None:
        confirmed = await _channel(self.conn, confirms=True)
        await self.topology.declare(confirmed)  # whichever process comes first declares
        self._reply = confirmed.default_exchange
        for agent in self.ids:
            channel = await _channel(self.conn, confirms=False, prefetch=WORKER_PREFETCH)
            await self.topology.declare(channel, self.topology.agent_spec(agent))
            name = self.topology.agent_queue(agent, DEFAULT_BAND)
            queue = await channel.get_queue(name, ensure=False)
            await queue.consume(self._handler(agent))

    def _handler(self, agent: str) -> Any:
        async def on_message(message: AbstractIncomingMessage) -> None:
            assert self._reply is not None
            received = time.perf_counter()
            envelope = orjson.loads(message.body)
            result = {
                "task_id": envelope["task_id"],
                "trace_id": envelope.get("trace_id"),
                "status": "completed",
                "output": {"ok": True},
                "agent_id": agent,
                "instance_id": f"{agent}-raw",
                "timings": {"handler_ms": round((time.perf_counter() - received) * 1000, 3)},
                "hops": envelope.get("hops", 0),
            }
            reply_to = envelope.get("reply_to")
            if reply_to:
                await self._reply.publish(
                    aio_pika.Message(
                        orjson.dumps(result),
                        content_type=JSON,
                        delivery_mode=DeliveryMode.PERSISTENT,
                        correlation_id=envelope["task_id"],
                    ),
                    routing_key=reply_to,
                    mandatory=False,
                )
            await message.ack()

        return on_message


async def run(args: argparse.Namespace) -> int:
    settings = Settings.from_env(namespace=args.namespace)
    topology = Topology.from_settings(settings)
    ids = agent_ids(*parse_slice(args.agents))
    conn = await aio_pika.connect_robust(
        settings.amqp_urls[0].get_secret_value(),
        # named as a MeshConnection is, so bench/brokerstat.py tells processes apart
        client_properties={
            "connection_name": f"{args.namespace}/raw-{args.role}/{socket.gethostname()}:"
            f"{os.getpid()}"
        },
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        if args.role == "router":
            await RawRouter(conn, topology, ids).start(settings.prefetch)
        else:
            await RawWorker(conn, topology, ids).start()
        if args.ready:
            await asyncio.to_thread(Path(args.ready).write_text, "ready\n")
        await stop.wait()
    finally:
        await conn.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("role", choices=("router", "worker"))
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--agents", default="0:100", help="START:STOP of bench.load_agents")
    parser.add_argument("--ready", default=None, help="file written once consuming")
    return asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
