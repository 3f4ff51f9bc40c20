"""Registry CPU under heartbeat load: N simulated instances beating every `interval` seconds.

The registry runs in its own process; this process simulates the instances (registers
them, then sends their heartbeats evenly spread over the interval) and asks the registry
for its CPU time (`time.process_time`) and heartbeat count at the start and end of the
measured window. Prints CPU % of one core and CPU ms per 1,000 heartbeats.

    .venv/bin/python bench/registry_heartbeats.py --instances 1000 --interval 5 --duration 30

Goal: 1,000 instances at 5 s under 10 % of one core.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import time
import uuid
from multiprocessing.connection import Connection
from typing import Any

import aio_pika

from mesh.config import Settings
from mesh.connection import connect
from mesh.management import Management
from mesh.registry import protocol
from mesh.registry.service import RegistryService
from mesh.registry.state import load_state
from mesh.schemas import Heartbeat, Registration, RegistrationAck, decode, now_ms


def registry_process(overrides: dict[str, Any], pipe: Connection) -> None:
    """Run one registry; answer ``mark`` with (cpu_s, heartbeats, wall_s); stop on ``stop``."""

    async def main() -> None:
        settings = Settings.from_env(**overrides)
        async with await connect(settings, name="bench-registry") as conn:
            service = RegistryService(conn)
            await service.start()
            pipe.send("ready")
            while True:
                command = await asyncio.to_thread(pipe.recv)
                if command == "stop":
                    break
                pipe.send(
                    (
                        time.process_time(),
                        service.stats["heartbeats"],
                        time.monotonic(),
                        dict(service.stats),
                    )
                )
            await service.close()

    asyncio.run(main())


async def simulate(settings: Settings, pipe: Connection, args: argparse.Namespace) -> None:
    async with await connect(settings, name="bench-instances") as conn:
        channel = await conn.channel(confirms=False)
        replies = await channel.declare_queue(exclusive=True, auto_delete=True)
        acks: dict[str, RegistrationAck] = {}
        lost = 0
        done = asyncio.Event()

        async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
            nonlocal lost
            if message.type == protocol.LEASE_LOST:
                lost += 1
                return
            ack = decode(RegistrationAck, message.body)
            acks[ack.instance_id] = ack
            if len(acks) == args.instances:
                done.set()

        await replies.consume(on_reply, no_ack=True)
        registry = await channel.get_exchange(conn.topology.registry, ensure=False)
        key = conn.topology.registry_key
        regs = [
            Registration(
                agent_id=f"agent-{n % 50}",
                instance_id=f"inst-{n}",
                capability_text=f"simulated agent {n % 50}",
                max_concurrency=4,
            )
            for n in range(args.instances)
        ]
        started = time.monotonic()
        for reg in regs:
            await registry.publish(
                protocol.register_message(
                    reg, reply_to=replies.name, correlation_id=reg.instance_id, expiration_s=60
                ),
                routing_key=key,
                mandatory=False,
            )
        await asyncio.wait_for(done.wait(), timeout=120)
        print(f"registered {len(acks)} instances in {time.monotonic() - started:.1f}s")

        async def beat_forever() -> None:
            # spread the beats evenly: every `tick` seconds, `per_tick` instances beat
            tick = 0.05
            per_tick = max(1, round(args.instances * tick / args.interval))
            cursor = 0
            next_at = time.monotonic()
            while True:
                for _ in range(per_tick):
                    reg = regs[cursor % len(regs)]
                    cursor += 1
                    beat = Heartbeat(
                        agent_id=reg.agent_id,
                        instance_id=reg.instance_id,
                        token=acks[reg.instance_id].token,
                        in_flight=cursor % 3,
                        max_concurrency=4,
                        sent_ms=now_ms(),
                    )
                    await registry.publish(
                        protocol.heartbeat_message(
                            beat, reply_to=replies.name, expiration_s=args.interval
                        ),
                        routing_key=key,
                        mandatory=False,
                    )
                next_at += tick
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))

        beating = asyncio.create_task(beat_forever())
        await asyncio.sleep(args.interval)  # warm-up: one full round of heartbeats
        pipe.send("mark")
        cpu0, hb0, wall0, _ = pipe.recv()
        await asyncio.sleep(args.duration)
        pipe.send("mark")
        cpu1, hb1, wall1, stats = pipe.recv()
        beating.cancel()
        state = await load_state(conn.redis, conn.keys)
        now = now_ms()
        live = sum(len(a.live_instances(now)) for a in state.values())

        cpu, beats, wall = cpu1 - cpu0, hb1 - hb0, wall1 - wall0
        print(f"instances            {args.instances} at a {args.interval:g}s interval")
        print(f"window               {wall:.1f}s, {beats} heartbeats ({beats / wall:.0f}/s)")
        print(f"registry CPU         {cpu:.3f}s = {100 * cpu / wall:.2f} % of one core")
        if beats:
            print(f"CPU per 1,000 beats  {1000 * cpu / beats * 1000:.1f} ms")
        print(f"batches              {stats['batches']} (Lua calls for heartbeats, total)")
        print(f"live leases at end   {live} / {args.instances}; lease.lost notices {lost}")
        print("goal (<10 % of one core):", "met" if 100 * cpu / wall < 10 else "NOT met")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=5.0)
    parser.add_argument("--duration", type=float, default=30.0)
    args = parser.parse_args()
    overrides: dict[str, Any] = {
        "namespace": f"bench.{uuid.uuid4().hex[:8]}",
        "heartbeat_s": args.interval,
        "lease_ttl_s": args.interval * 3,
    }
    settings = Settings.from_env(**overrides)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=registry_process, args=(overrides, child))
    proc.start()
    try:
        if parent.recv() != "ready":
            raise SystemExit("registry did not start")
        asyncio.run(simulate(settings, parent, args))
    finally:
        parent.send("stop")
        proc.join(timeout=10)
        asyncio.run(_cleanup(settings))


async def _cleanup(settings: Settings) -> None:
    await asyncio.to_thread(Management(settings).purge_namespace, settings.namespace)
    async with await connect(settings, name="bench-cleanup") as conn:
        keys: list[Any] = [k async for k in conn.redis.scan_iter(match=conn.keys.pattern())]
        if keys:
            await conn.redis.delete(*keys)


if __name__ == "__main__":
    main()
