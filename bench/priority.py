"""Priority benchmark: bands drained by weight (5:3:1) against strict priority, both queue modes.

For each queue mode (``--modes classic,quorum``) two child processes (``priority.py serve``)
run a router and a worker of agent ``prio`` (``--concurrency`` slots, a handler of
``--handler-ms``), on a namespace of its own; this process is the caller. Each scenario is
repeated ``--repeat`` times: median [min-max] of the per-run figures.

1. **High-priority wait under a low-priority backlog.** ``--probes`` high-priority tasks
   (priority 9), one at a time at random moments, first on the idle mesh, then behind a
   backlog of ``--backlog`` low-priority tasks (priority 1, handler times 0.5-1.5 x
   ``--handler-ms``) submitted at once: first while the router is still taking the burst
   in (every task passes it), then once the backlog is dispatched and waits in the agent's
   queue for its slots. Per task: the queue wait (submitted -> its handler started, both
   clocks of this host) and the time to its Result. Goal: behind the queued backlog,
   within 2 x the idle figure. With every slot busy a high-priority task still waits for
   one to free (the rest of a running task: about a handler time / (slots + 1)), so the
   queue wait alone grows by that much; the backlog left when the last probe answered
   shows the probes really were behind it.
2. **Low priority under a high-priority flood.** ``--flood`` tasks in the proportions
   high:normal:low = 10:3:1, submitted at once, high first. Over the first ``--window``
   handler starts after the last submit (every band still has a backlog then), the share
   of the slots each band got; goal: low within 20 % of 1/9 (weights 5:3:1). And how long
   after the flood began the first low-priority task completed.

The raw aio-pika baseline is the old classic mode's strict priority: one queue with
``x-max-priority 10``, the same flood, a consumer of the same prefetch and handler time.

Dispatches do not expire in the agent queue (``MESH_ACCEPT_TIMEOUT_MS=120000``): a backlog
of a live agent would otherwise cycle through the router (the faults issue's backlog path),
which is not what is measured here.

Usage::

    .venv/bin/python bench/priority.py                    # both modes, 3 repeats (~6 min)
    .venv/bin/python bench/priority.py --modes classic --repeat 1 --backlog 500 --flood 700
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aio_pika

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mesh import Agent, MeshClient, TaskContext  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.connection import MeshConnection, connect  # noqa: E402
from mesh.router.service import RouterService  # noqa: E402
from mesh.schemas import Result, TaskEnvelope, new_id  # noqa: E402
from mesh.worker.runtime import WorkerRuntime  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python")
AGENT = "prio"
PRIORITIES = {"high": 9, "normal": 5, "low": 1}
#: the flood's proportions (high first: it is a flood of high-priority tasks)
FLOOD_MIX = {"high": 10, "normal": 3, "low": 1}
ACCEPT_TIMEOUT_MS = 120_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the child: a router and a worker --------------------------------------------------------
def bench_agent(concurrency: int, handler_ms: float) -> Agent:
    agent = Agent(AGENT, "Answers when it started", max_concurrency=concurrency)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        started = time.time() * 1000
        await asyncio.sleep(float(task.payload.get("ms", handler_ms)) / 1000)
        return {"started_ms": started}

    return agent


async def serve(args: argparse.Namespace) -> None:
    settings = Settings.from_env(
        namespace=args.namespace, queue_type=args.mode, accept_timeout_ms=ACCEPT_TIMEOUT_MS
    )
    conn = await connect(settings)
    part: RouterService | WorkerRuntime = (
        RouterService(conn)
        if args.role == "router"
        else WorkerRuntime(bench_agent(args.concurrency, args.handler_ms), conn)
    )
    await part.start()
    await asyncio.to_thread(Path(args.ready).write_text, "ready")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    if isinstance(part, WorkerRuntime):
        await part.drain(grace_s=2)
    else:
        await part.close()
    await conn.close()


# --- measuring ---------------------------------------------------------------------------------
@dataclass
class Run:
    backlog: Backlog
    shares: dict[str, float]
    first_low_s: float | None


@dataclass
class Figures:
    name: str
    runs: list[Run] = field(default_factory=list)


def envelope(priority: int, n: int, ms: float | None = None) -> TaskEnvelope:
    """A task for the agent; `ms`: its handler's time (None: ``--handler-ms``)."""
    payload: dict[str, Any] = {"n": n} if ms is None else {"n": n, "ms": ms}
    return TaskEnvelope(
        capability="work", payload=payload, target=AGENT, priority=priority, timeout_ms=120_000
    )


def varied(handler_ms: float) -> float:
    """A backlog task's handler time: 0.5 to 1.5 x the mean (real handlers vary, and equal
    times would keep the slots in lockstep, every one freed at the same instant)."""
    return handler_ms * random.uniform(0.5, 1.5)


def started_of(result: Result) -> float:
    output = result.output if isinstance(result.output, dict) else {}
    return float(output.get("started_ms", 0.0))


async def probe(
    client: MeshClient, count: int, handler_ms: float
) -> tuple[list[float], list[float]]:
    """`count` high-priority tasks, one at a time, each after a random pause (0 to one
    handler time: they arrive at any point of the slots' work): (queue waits, times to the
    Result) in ms."""
    waits, results = [], []
    for n in range(count):
        await asyncio.sleep(random.uniform(0, handler_ms) / 1000)
        sent = envelope(PRIORITIES["high"], n)
        submitted = time.time() * 1000
        t0 = time.perf_counter()
        result = await client.send(sent, wait_s=120)
        if result.status != "completed":
            raise RuntimeError(f"probe {n} ended {result.status}: {result.error}")
        results.append((time.perf_counter() - t0) * 1000)
        waits.append(started_of(result) - submitted)
    return waits, results


async def queued(conn: MeshConnection, names: Sequence[str]) -> int:
    """Messages ready in the queues `names` (passive declares)."""
    channel = await conn.channel(confirms=False)
    try:
        total = 0
        for name in names:
            declared = await channel.declare_queue(name, passive=True)
            total += int(declared.declaration_result.message_count or 0)
        return total
    finally:
        await channel.close()


@dataclass
class Backlog:
    """Median figures of one backlog scenario run (ms; `left`: backlog tasks unanswered when
    the last probe answered)."""

    idle_wait: float
    idle_result: float
    burst_wait: float
    burst_result: float
    burst_left: int
    queued_wait: float
    queued_result: float
    queued_left: int


async def backlog_scenario(
    conn: MeshConnection, client: Collector, args: argparse.Namespace
) -> Backlog:
    await probe(client, 3, args.handler_ms)  # warm: channels, caches
    idle_waits, idle_results = await probe(client, args.probes, args.handler_ms)
    low = [envelope(PRIORITIES["low"], n, varied(args.handler_ms)) for n in range(args.backlog)]
    pending = [client.expect(e) for e in low]
    await asyncio.gather(*(client.submit(e) for e in low))  # all confirmed: queued
    # (a) the burst: the routers are still taking the backlog in
    burst_waits, burst_results = await probe(client, args.probes, args.handler_ms)
    burst_left = sum(1 for fut in pending if not fut.done())
    # (b) the backlog dispatched, waiting in the agent's queue for its slots
    routers = [name for name, _ in conn.topology.router_queues()]
    while await queued(conn, routers):  # noqa: ASYNC110 - a broker count, polled
        await asyncio.sleep(0.05)
    waits, results = await probe(client, args.probes, args.handler_ms)
    left = sum(1 for fut in pending if not fut.done())
    ended = await asyncio.wait_for(asyncio.gather(*pending), timeout=600)
    if any(r.status != "completed" for r in ended):
        raise RuntimeError(f"backlog: {Counter(r.status for r in ended)}")
    m = statistics.median
    return Backlog(
        m(idle_waits),
        m(idle_results),
        m(burst_waits),
        m(burst_results),
        burst_left,
        m(waits),
        m(results),
        left,
    )


def flood_plan(total: int) -> list[tuple[str, int]]:
    """(band, n) of every flood task in submit order: all high, then normal, then low."""
    unit = total / sum(FLOOD_MIX.values())
    return [(band, n) for band, part in FLOOD_MIX.items() for n in range(round(unit * part))]


def window_shares(
    starts: list[tuple[float, str]], after_ms: float, window: int
) -> dict[str, float]:
    """The share of each band among the first `window` handler starts after `after_ms`."""
    chosen = [band for at, band in sorted(starts) if at >= after_ms][:window]
    if len(chosen) < window:
        raise RuntimeError(f"only {len(chosen)} starts after the flood was in (--window)")
    counts = Counter(chosen)
    return {band: counts[band] / window for band in PRIORITIES}


class Collector(MeshClient):
    """A MeshClient whose Results of submitted tasks land in futures (`expect` first)."""

    def __init__(self, conn: MeshConnection) -> None:
        super().__init__(conn, on_result=self._arrived)
        self.futures: dict[str, asyncio.Future[Result]] = {}

    def expect(self, sent: TaskEnvelope) -> asyncio.Future[Result]:
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self.futures[sent.task_id] = fut
        return fut

    def _arrived(self, result: Result) -> None:
        fut = self.futures.pop(result.task_id, None)
        if fut is not None and not fut.done():
            fut.set_result(result)


async def flood_scenario(
    client: Collector, args: argparse.Namespace
) -> tuple[dict[str, float], float | None]:
    plan = flood_plan(args.flood)
    sent = [(band, envelope(PRIORITIES[band], n, varied(args.handler_ms))) for band, n in plan]
    futures = [client.expect(e) for _, e in sent]
    began = time.perf_counter()
    first_low: list[float] = []

    def low_done(_: asyncio.Future[Result]) -> None:
        if not first_low:
            first_low.append(time.perf_counter() - began)

    for (band, _), fut in zip(sent, futures, strict=True):
        if band == "low":
            fut.add_done_callback(low_done)
    # published in plan order (high first), each confirmed
    await asyncio.gather(*(client.submit(e) for _, e in sent))
    in_ms = time.time() * 1000  # from here every band has its whole backlog queued
    results = await asyncio.wait_for(asyncio.gather(*futures), timeout=300)
    if any(r.status != "completed" for r in results):
        raise RuntimeError(f"flood: {Counter(r.status for r in results)}")
    starts = [(started_of(r), band) for (band, _), r in zip(sent, results, strict=True)]
    return window_shares(starts, in_ms, args.window), (first_low or [None])[0]


async def strict_baseline(conn: MeshConnection, args: argparse.Namespace) -> dict[str, float]:
    """The old classic mode: one queue, x-max-priority 10, the same flood and consumer."""
    channel = await conn.channel(prefetch=args.concurrency + 1)
    name = f"{conn.settings.namespace}.raw.strict"
    queue = await channel.declare_queue(name, arguments={"x-max-priority": 10})
    publisher = await conn.channel()
    plan = flood_plan(args.flood)
    for band, n in plan:
        await publisher.default_exchange.publish(
            aio_pika.Message(f"{band}:{n}".encode(), priority=PRIORITIES[band]),
            routing_key=name,
        )
    in_ms = time.time() * 1000
    starts: list[tuple[float, str]] = []
    slots = asyncio.Semaphore(args.concurrency)
    finished = asyncio.Event()

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        async with slots:
            starts.append((time.time() * 1000, message.body.decode().split(":")[0]))
            await asyncio.sleep(args.handler_ms / 1000)
            await message.ack()
        if len(starts) >= args.window:
            finished.set()

    tag = await queue.consume(on_message)
    await asyncio.wait_for(finished.wait(), timeout=300)
    await queue.cancel(tag)
    await queue.delete(if_unused=False, if_empty=False)
    await channel.close()
    await publisher.close()
    return window_shares(starts, in_ms, args.window)


# --- one queue mode ----------------------------------------------------------------------------
class Child:
    """One serving process (``serve --role router|worker``), its stderr in `log_dir`."""

    def __init__(
        self, role: str, namespace: str, mode: str, args: argparse.Namespace, log_dir: Path
    ) -> None:
        ready = log_dir / f"{mode}-{role}.ready"
        ready.unlink(missing_ok=True)
        self.ready = ready
        cmd = [PYTHON, str(Path(__file__).resolve()), "serve", "--namespace", namespace]
        cmd += ["--mode", mode, "--role", role, "--concurrency", str(args.concurrency)]
        cmd += ["--handler-ms", str(args.handler_ms), "--ready", str(ready)]
        with (log_dir / f"{mode}-{role}.err").open("ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(os.environ), stderr=err)

    async def wait_ready(self, timeout: float = 60.0) -> None:
        end = time.monotonic() + timeout
        while not self.ready.exists():
            if self.proc.poll() is not None:
                raise RuntimeError(f"the serving child exited {self.proc.returncode}")
            if time.monotonic() > end:
                raise TimeoutError("the serving child did not start")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


async def cleanup(settings: Settings) -> None:
    """Delete the namespace's queues and exchanges (this benchmark's own, never others')."""
    from mesh.topology import Topology

    topology = Topology.from_settings(settings)
    async with await connect(settings) as conn:
        channel = await conn.channel()
        for q in [*topology.static_spec().queues, *topology.agent_spec(AGENT).queues]:
            await channel.queue_delete(q.name)
        for ex in topology.static_spec().exchanges:
            await channel.exchange_delete(ex.name)
        await channel.close()
        keys = [k async for k in conn.redis.scan_iter(match=f"{settings.namespace}:*")]
        if keys:
            await conn.redis.delete(*keys)


async def run_mode(mode: str, args: argparse.Namespace, log_dir: Path) -> Figures:
    namespace = f"bench-prio-{mode}-{new_id()[:6]}"
    settings = Settings.from_env(
        namespace=namespace, queue_type=mode, accept_timeout_ms=ACCEPT_TIMEOUT_MS
    )
    figures = Figures(mode)
    children = []
    try:
        for role in ("router", "worker"):  # the router declares the topology first
            children.append(Child(role, namespace, mode, args, log_dir))
            await children[-1].wait_ready()
        async with await connect(settings) as conn, Collector(conn) as client:
            for i in range(args.repeat):
                b = await backlog_scenario(conn, client, args)
                shares, first_low = await flood_scenario(client, args)
                figures.runs.append(Run(b, shares, first_low))
                log(
                    f"{mode} run {i + 1}: high wait idle {b.idle_wait:.1f} ms, in the burst "
                    f"{b.burst_wait:.1f} ms (left {b.burst_left}), behind the queued backlog "
                    f"{b.queued_wait:.1f} ms (left {b.queued_left}); flood shares "
                    f"{fmt_shares(shares)}, first low {first_low or 0:.2f} s"
                )
    finally:
        for child in children:
            child.stop()
        await cleanup(settings)
    return figures


async def run_strict(args: argparse.Namespace) -> list[dict[str, float]]:
    settings = Settings.from_env(namespace=f"bench-prio-raw-{new_id()[:6]}")
    out = []
    async with await connect(settings) as conn:
        for i in range(args.repeat):
            shares = await strict_baseline(conn, args)
            log(f"strict priority run {i + 1}: shares {fmt_shares(shares)}")
            out.append(shares)
    return out


# --- report ------------------------------------------------------------------------------------
def fmt_shares(shares: dict[str, float]) -> str:
    return " ".join(f"{band} {share:.3f}" for band, share in shares.items())


def med(values: Sequence[float], digits: int = 1) -> str:
    if not values:
        return "n/a"
    mid = statistics.median(values)
    if len(values) < 2:
        return f"{mid:.{digits}f}"
    return f"{mid:.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def table(modes: list[Figures], strict: list[dict[str, float]], args: argparse.Namespace) -> str:
    load = os.getloadavg()[0]
    lines = [
        f"priority bench {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC (load average {load:.1f} "
        f"on {os.cpu_count()} cores): concurrency {args.concurrency}, handler "
        f"{args.handler_ms:g} ms, backlog {args.backlog}, {args.probes} probes, flood "
        f"{args.flood} (10:3:1 high:normal:low), window {args.window}, {args.repeat} run(s): "
        "median [min-max]",
        "",
        "High-priority tasks behind a low-priority backlog: queue wait (submitted -> handler "
        "started) and time to the Result, ms",
        "",
        "| mode | idle: wait / Result | backlog queued: wait / Result | ratio to idle: wait / "
        "Result (goal <= 2) | backlog left | burst (routers taking it in): wait / Result "
        "| left |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in modes:
        b = [r.backlog for r in f.runs]
        lines.append(
            f"| {f.name} | {med([x.idle_wait for x in b])} / {med([x.idle_result for x in b])} "
            f"| {med([x.queued_wait for x in b])} / {med([x.queued_result for x in b])} "
            f"| {med([x.queued_wait / x.idle_wait for x in b], 2)} / "
            f"{med([x.queued_result / x.idle_result for x in b], 2)} "
            f"| {med([float(x.queued_left) for x in b], 0)} "
            f"| {med([x.burst_wait for x in b])} / {med([x.burst_result for x in b])} "
            f"| {med([float(x.burst_left) for x in b], 0)} |"
        )
    lines += [
        "",
        "Shares of the slots under a high-priority flood (every band backlogged), and the "
        "first low-priority task done",
        "",
        "| mode | low (goal 0.111 +- 20 %) | normal (0.333) | high (0.556) | first low done (s) |",
        "|---|---|---|---|---|",
    ]
    for f in modes:
        r = f.runs
        lines.append(
            f"| {f.name} | {med([x.shares['low'] for x in r], 3)} "
            f"| {med([x.shares['normal'] for x in r], 3)} "
            f"| {med([x.shares['high'] for x in r], 3)} "
            f"| {med([x.first_low_s for x in r if x.first_low_s is not None], 2)} |"
        )
    if strict:
        lines.append(
            "| strict priority (raw aio-pika, one x-max-priority 10 queue) "
            f"| {med([s['low'] for s in strict], 3)} | {med([s['normal'] for s in strict], 3)} "
            f"| {med([s['high'] for s in strict], 3)} | after every high one |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="(internal) the router and worker of one mode")
    s.add_argument("--namespace", required=True)
    s.add_argument("--mode", required=True)
    s.add_argument("--role", choices=["router", "worker"], required=True)
    s.add_argument("--concurrency", type=int, required=True)
    s.add_argument("--handler-ms", type=float, required=True)
    s.add_argument("--ready", required=True)
    p.add_argument("--modes", default="classic,quorum")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=4, help="the agent's slots")
    p.add_argument("--handler-ms", type=float, default=50.0)
    p.add_argument("--backlog", type=int, default=2000, help="low-priority tasks")
    p.add_argument("--probes", type=int, default=20, help="high-priority tasks, one at a time")
    p.add_argument("--flood", type=int, default=1400, help="tasks of the flood (10:3:1)")
    p.add_argument("--window", type=int, default=540, help="handler starts the shares count")
    p.add_argument("--skip-raw", action="store_true")
    return p.parse_args(argv)


async def run_all(args: argparse.Namespace) -> str:
    log_dir = Path(f"/tmp/bench-priority-{os.getpid()}")
    await asyncio.to_thread(log_dir.mkdir, parents=True, exist_ok=True)
    modes = [await run_mode(m, args, log_dir) for m in args.modes.split(",") if m]
    strict = [] if args.skip_raw else await run_strict(args)
    return table(modes, strict, args)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.command == "serve":
        asyncio.run(serve(args))
        return 0
    print(asyncio.run(run_all(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
