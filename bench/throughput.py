"""End-to-end throughput and latency: client -> router -> worker -> Result, on the real broker.

Starts `mesh registry`, `mesh router` and `mesh worker agents.support:<agent>` as separate
processes in a fresh namespace, submits N tasks with a bounded number in flight, and prints
tasks/s and latency percentiles, first with a `target` (no semantic routing), then routed
semantically. Cleans the namespace up afterwards.

Usage: ``python bench/throughput.py [--tasks 2000] [--in-flight 200]``
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mesh.client import MeshClient  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.connection import connect  # noqa: E402
from mesh.management import Management  # noqa: E402
from mesh.registry.snapshot import AgentSnapshot  # noqa: E402
from mesh.schemas import new_id  # noqa: E402

TEXTS = (
    "where is my parcel? it was due yesterday",
    "I want to return these shoes and get my money back",
    "is the blue one in stock",
)


async def run_batch(
    client: MeshClient, n: int, in_flight: int, target: str | None
) -> tuple[float, list[float], int]:
    sem = asyncio.Semaphore(in_flight)
    latencies: list[float] = []
    failures = 0

    async def one(i: int) -> None:
        nonlocal failures
        async with sem:
            t0 = time.perf_counter()
            r = await client.request(
                TEXTS[i % len(TEXTS)],
                {"order_id": str(i)},
                target=target,
                timeout_ms=60_000,
                wait_s=120,
            )
            latencies.append((time.perf_counter() - t0) * 1000)
            failures += r.status != "completed"

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(n)))
    return time.perf_counter() - start, latencies, failures


def start_processes(namespace: str) -> list[subprocess.Popen[bytes]]:
    env = {**os.environ, "MESH_NAMESPACE": namespace}
    mesh = str(ROOT / ".venv" / "bin" / "mesh")
    commands = [[mesh, "registry"], [mesh, "router"]]
    commands += [
        [mesh, "worker", f"agents.support:{n}"] for n in ("refunds", "logistics", "presales")
    ]
    return [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, cwd=ROOT) for cmd in commands]


async def wait_for_agents(snapshot: AgentSnapshot, count: int, timeout: float) -> None:
    changed = asyncio.Event()
    snapshot.on_change(lambda _agent_id: changed.set())
    async with asyncio.timeout(timeout):
        while len(snapshot.live_agents()) < count:
            changed.clear()
            await changed.wait()


async def measure(settings: Settings, args: argparse.Namespace) -> None:
    async with await connect(settings, name="bench-throughput") as conn:
        snapshot = AgentSnapshot(conn)
        await snapshot.start()
        print("waiting for the agents to register...", file=sys.stderr, flush=True)
        await wait_for_agents(snapshot, 3, 90)
        await snapshot.close()
        async with MeshClient(conn) as client:
            await run_batch(client, 60, 20, None)  # warm-up: router loaded, caches filled
            print(
                f"{'mode':10s} {'tasks':>6s} {'tasks/s':>8s} {'p50 ms':>8s} "
                f"{'p99 ms':>8s} {'failed':>6s}"
            )
            for mode, target in (("target", "support.refunds"), ("semantic", None)):
                secs, lat, failed = await run_batch(client, args.tasks, args.in_flight, target)
                print(
                    f"{mode:10s} {args.tasks:6d} {args.tasks / secs:8.0f} "
                    f"{np.percentile(lat, 50):8.1f} {np.percentile(lat, 99):8.1f} "
                    f"{failed:6d}",
                    flush=True,
                )


async def cleanup(settings: Settings) -> None:
    await asyncio.to_thread(Management(settings).purge_namespace, settings.namespace)
    async with await connect(settings, name="bench-cleanup") as conn:
        keys = [k async for k in conn.redis.scan_iter(match=conn.keys.pattern())]
        for i in range(0, len(keys), 1000):
            await conn.redis.delete(*keys[i : i + 1000])


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=200)
    args = parser.parse_args()
    settings = Settings.from_env(namespace=f"bench-{new_id()[:8]}")
    procs = start_processes(settings.namespace)
    try:
        asyncio.run(measure(settings, args))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        asyncio.run(cleanup(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
