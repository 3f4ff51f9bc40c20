"""What access control costs: Results through a router (one more hop), measured in one run.

Under ``MESH_ACCESS_CONTROL`` a worker does not write its callers' reply queues: it sends a
notice to ``<ns>.results`` and a router forwards the stored Result. This bench runs the
same targeted load four ways, alternating, in one process each time (registry, router,
worker, client on their own connections):

- ``mesh``: access control off (guest, default vhost): client -> router -> worker -> client;
- ``mesh+ac``: access control on, every component under its own provisioned user in a
  fresh vhost: client -> router -> worker -> router -> client;
- ``raw`` and ``raw+hop``: plain aio-pika pipelines with those same hops (persistent
  messages, publisher confirms, ack after the confirm), nothing else.

Closed loop (``--concurrency`` requests in flight) and open loop (``--rate`` arrivals per
second on a schedule), ``-r`` repeats; prints the median and the range of each, and the
ratios mesh/raw and mesh+ac/raw+hop (the figure that holds on a noisy machine).

    .venv/bin/python bench/results_hop.py -r 3 --tasks 1500 --concurrency 32 --rate 150
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import aio_pika
import orjson
import redis.asyncio as redis_asyncio
from aio_pika.abc import AbstractIncomingMessage

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mesh import Agent, MeshClient, TaskContext  # noqa: E402
from mesh.access.provision import Provisioner  # noqa: E402
from mesh.access.roles import AccessScope, Role, build_plan, roles_for  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.connection import MeshConnection, connect  # noqa: E402
from mesh.keys import Keys  # noqa: E402
from mesh.management import Management  # noqa: E402
from mesh.metrics import Metrics  # noqa: E402
from mesh.router.service import RouterService  # noqa: E402
from mesh.schemas import TaskEnvelope  # noqa: E402
from mesh.services import start_registry, start_worker  # noqa: E402
from mesh.topology import Topology  # noqa: E402

AGENT = "hop.echo"
Send = Callable[[int], Awaitable[None]]


def _echo(concurrency: int) -> Agent:
    agent = Agent(AGENT, "echoes", max_concurrency=concurrency)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"n": task.payload.get("n")}

    return agent


# --- the mesh, with and without access control ----------------------------------------------
@asynccontextmanager
async def mesh(access: bool, concurrency: int, metrics: bool = False) -> AsyncIterator[Send]:
    namespace = f"hop.{uuid.uuid4().hex[:10]}"
    base = Settings.from_env(namespace=namespace)
    async with AsyncExitStack() as stack:
        if access:
            urls = await stack.enter_async_context(provisioned(base))
        else:
            urls = {
                role: (base.amqp_url.get_secret_value(), base.redis_url.get_secret_value())
                for role in ("admin", "router", "registry", "worker", "client")
            }
        stack.push_async_callback(purge, base)

        async def conn(role: str) -> MeshConnection:
            amqp, redis_url = urls[role]
            settings = Settings.from_env(
                namespace=namespace,
                amqp_url=amqp,
                redis_url=redis_url,
                access_control=access,
                topology="passive" if access else "apply",
            )
            c = await connect(settings, name=f"hop-{role}")
            stack.push_async_callback(c.close)
            return c

        if access:
            admin = await conn("admin")
            channel = await admin.channel()
            await admin.topology.declare(channel, apply=True)
            await admin.topology.declare(channel, admin.topology.agent_spec(AGENT), apply=True)
            await channel.close()

        def recorded(role: str) -> Metrics | None:
            """What a process with MESH_METRICS_PORT set records (mode ``mesh+m``)."""
            return Metrics(role=role, namespace=namespace) if metrics else None

        registry_conn = await conn("registry")
        stack.push_async_callback(await start_registry(registry_conn, metrics=recorded("registry")))
        router = RouterService(await conn("router"), metrics=recorded("router"))
        await router.start()
        stack.push_async_callback(router.close)
        worker = await start_worker(
            await conn("worker"), _echo(concurrency), metrics=recorded("worker")
        )
        stack.push_async_callback(worker)
        client = await stack.enter_async_context(MeshClient(await conn("client")))

        async def send(n: int) -> None:
            result = await client.request("echo", {"n": n}, target=AGENT, wait_s=60)
            if result.status != "completed":
                raise RuntimeError(f"task {n}: {result.status} {result.error}")

        yield send


@asynccontextmanager
async def provisioned(base: Settings) -> AsyncIterator[dict[str, tuple[str, str]]]:
    provisioner = Provisioner.from_settings(base)
    scope = AccessScope(base.namespace, f"hop-{uuid.uuid4().hex[:8]}")
    roles = roles_for([AGENT], ["bench"])
    plan = build_plan(scope, Topology(namespace=base.namespace), roles)
    report = await asyncio.to_thread(provisioner.provision, plan, create_vhost=True)
    names = {
        "admin": Role("admin"),
        "router": Role("router"),
        "registry": Role("registry"),
        "worker": Role("worker", AGENT),
        "client": Role("client", "bench"),
    }
    urls = {}
    for role, each in names.items():
        creds = report.of(each).credentials
        assert creds is not None
        urls[role] = (creds.amqp_url, creds.redis_url)
    try:
        yield urls
    finally:
        await asyncio.to_thread(provisioner.revoke, scope, delete_vhost=True)
        cleaner = redis_asyncio.Redis.from_url(base.redis_url.get_secret_value())
        try:
            for role in roles:
                await cleaner.execute_command("ACL", "DELUSER", scope.user(role))
            # the tenant's keys (its vhost is part of them; `purge` deletes those of "/")
            pattern = Keys(scope.namespace, scope.vhost).pattern()
            keys = [k async for k in cleaner.scan_iter(match=pattern)]
            if keys:
                await cleaner.delete(*keys)
        finally:
            await cleaner.aclose()
        provisioner.close()


async def purge(settings: Settings) -> None:
    await asyncio.to_thread(Management(settings).purge_namespace, settings.namespace)
    cleaner = redis_asyncio.Redis.from_url(settings.redis_url.get_secret_value())
    try:
        keys = [k async for k in cleaner.scan_iter(match=f"{settings.namespace}:*")]
        if keys:
            await cleaner.delete(*keys)
    finally:
        await cleaner.aclose()


# --- the raw pipelines --------------------------------------------------------------------
@asynccontextmanager
async def raw(extra_hop: bool, concurrency: int) -> AsyncIterator[Send]:
    """client -> router -> worker [-> router] -> client, plain aio-pika, same guarantees."""
    ns = f"hopraw.{uuid.uuid4().hex[:10]}"
    url = Settings.from_env().amqp_url.get_secret_value()
    async with AsyncExitStack() as stack:
        conns = []
        for _ in range(3):
            c = await aio_pika.connect_robust(url)
            stack.push_async_callback(c.close)
            conns.append(c)
        client_c, router_c, worker_c = conns
        names = {"router": f"{ns}.router", "agent": f"{ns}.agent", "results": f"{ns}.results"}

        async def consumer(conn: Any, queue: str, handle: Callable[..., Awaitable[None]]) -> Any:
            channel = await conn.channel(publisher_confirms=True)
            await channel.set_qos(prefetch_count=concurrency)
            q = await channel.declare_queue(queue, durable=True, auto_delete=True)
            await q.consume(lambda m: handle(channel, m))
            return channel

        async def hop(channel: Any, message: AbstractIncomingMessage, to: str) -> None:
            await channel.default_exchange.publish(
                aio_pika.Message(
                    message.body,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    reply_to=message.reply_to,
                    correlation_id=message.correlation_id,
                ),
                routing_key=to,
            )
            await message.ack()

        async def route(channel: Any, m: AbstractIncomingMessage) -> None:
            await hop(channel, m, names["agent"])

        async def work(channel: Any, m: AbstractIncomingMessage) -> None:
            await hop(channel, m, names["results"] if extra_hop else str(m.reply_to))

        async def forward(channel: Any, m: AbstractIncomingMessage) -> None:
            await hop(channel, m, str(m.reply_to))

        await consumer(router_c, names["router"], route)
        await consumer(worker_c, names["agent"], work)
        if extra_hop:
            await consumer(router_c, names["results"], forward)
        channel = await client_c.channel(publisher_confirms=True)
        reply = await channel.declare_queue(f"{ns}.reply", durable=True, auto_delete=True)
        pending: dict[str, asyncio.Future[None]] = {}

        async def on_reply(m: AbstractIncomingMessage) -> None:
            fut = pending.pop(str(m.correlation_id), None)
            if fut is not None and not fut.done():
                fut.set_result(None)
            await m.ack()

        await reply.consume(on_reply)

        async def send(n: int) -> None:
            cid = uuid.uuid4().hex
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            pending[cid] = fut
            body = orjson.dumps({"task_id": cid, "payload": {"n": n}})
            await channel.default_exchange.publish(
                aio_pika.Message(
                    body,
                    delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                    reply_to=reply.name,
                    correlation_id=cid,
                ),
                routing_key=names["router"],
            )
            await asyncio.wait_for(fut, 60)

        yield send


# --- load -----------------------------------------------------------------------------------
async def closed_loop(send: Send, tasks: int, concurrency: int) -> float:
    counter = iter(range(tasks))
    start = time.perf_counter()

    async def lane() -> None:
        for n in counter:
            await send(n)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    return tasks / (time.perf_counter() - start)


async def open_loop(send: Send, rate: float, seconds: float) -> tuple[float, float]:
    """(completed per second, p99 latency ms) with arrivals every 1/rate s."""
    latencies: list[float] = []
    start = time.perf_counter()

    async def one(n: int) -> None:
        await asyncio.sleep(max(0.0, start + n / rate - time.perf_counter()))
        t0 = time.perf_counter()
        await send(n)
        latencies.append((time.perf_counter() - t0) * 1000)

    total = int(rate * seconds)
    await asyncio.gather(*(one(n) for n in range(total)))
    took = time.perf_counter() - start
    return total / took, statistics.quantiles(latencies, n=100)[98]


MODES = {
    "raw": lambda c: raw(False, c),
    "raw+hop": lambda c: raw(True, c),
    "mesh": lambda c: mesh(False, c),
    "mesh+ac": lambda c: mesh(True, c),
    "mesh+m": lambda c: mesh(False, c, metrics=True),
}
#: what `--modes` runs unless told: the access-control comparison
DEFAULT_MODES = "raw,raw+hop,mesh,mesh+ac"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, dict[str, list[float]]] = {
        m: {"closed": [], "open": [], "p99": [], "cpu": []} for m in args.modes
    }
    for r in range(args.repeat):
        for mode in args.modes:
            async with MODES[mode](args.concurrency) as send:
                await closed_loop(send, min(100, args.tasks), args.concurrency)  # warm up
                cpu_before = time.process_time()
                closed = await closed_loop(send, args.tasks, args.concurrency)
                # this process's CPU per task (every mesh component runs here; the
                # broker and Redis do not): steadier than throughput on a shared host
                cpu_ms = (time.process_time() - cpu_before) * 1000 / args.tasks
                done, p99 = await open_loop(send, args.rate, args.seconds)
            figures[mode]["closed"].append(closed)
            figures[mode]["open"].append(done)
            figures[mode]["p99"].append(p99)
            figures[mode]["cpu"].append(cpu_ms)
            print(
                f"run {r + 1}/{args.repeat} {mode:8s} closed {closed:7.1f}/s  "
                f"open {done:6.1f}/s at {args.rate:.0f}/s offered, p99 {p99:6.1f} ms, "
                f"cpu {cpu_ms:.2f} ms/task",
                flush=True,
            )
    return figures


def _cell(values: list[float], digits: int = 1) -> str:
    m, lo, hi = statistics.median(values), min(values), max(values)
    return f"{m:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-r", "--repeat", type=int, default=3)
    p.add_argument("--tasks", type=int, default=1500, help="closed-loop tasks per point")
    p.add_argument("--concurrency", type=int, default=32, help="closed-loop requests in flight")
    p.add_argument("--rate", type=float, default=150.0, help="open-loop arrivals per second")
    p.add_argument("--seconds", type=float, default=10.0, help="open-loop duration")
    p.add_argument(
        "--modes",
        default=DEFAULT_MODES,
        help=f"comma-separated, run alternating each repeat: {', '.join(MODES)} "
        f"(default {DEFAULT_MODES}; mesh,mesh+m: what recording metrics costs)",
    )
    args = p.parse_args()
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = sorted(set(args.modes) - set(MODES))
    if unknown or not args.modes:
        p.error(
            f"--modes: unknown {', '.join(unknown) or '(none given)'}; one of {', '.join(MODES)}"
        )
    figures = asyncio.run(run(args))
    print("\nmedian [range] of", args.repeat, "runs")
    for mode, f in figures.items():
        print(
            f"  {mode:8s} closed {_cell(f['closed'])}/s  open {_cell(f['open'])}/s  "
            f"p99 {_cell(f['p99'])} ms  cpu {_cell(f['cpu'], 2)} ms/task"
        )
    closed = {mode: f["closed"] for mode, f in figures.items()}
    pairs = [
        ("mesh/raw", "mesh", "raw"),
        ("mesh+ac/raw+hop", "mesh+ac", "raw+hop"),
        ("mesh+ac/mesh", "mesh+ac", "mesh"),
        ("mesh+m/mesh (metrics)", "mesh+m", "mesh"),
    ]
    ratios = [
        f"{name} {_cell([a / b for a, b in zip(closed[x], closed[y], strict=True)], 3)}"
        for name, x, y in pairs
        if x in closed and y in closed
    ]
    if ratios:
        print("  closed-loop ratios, run by run: " + ", ".join(ratios))
    cpu = {mode: f["cpu"] for mode, f in figures.items()}
    if "mesh" in cpu and "mesh+m" in cpu:
        extra = [(m - b) / b for m, b in zip(cpu["mesh+m"], cpu["mesh"], strict=True)]
        print(f"  metrics: CPU per task +{_cell([100 * e for e in extra], 1)} % (mesh+m vs mesh)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
