"""Load benchmark: the mesh against a raw aio-pika pipeline with the same hops, in one run.

First the raw pipeline (bench/raw_pipeline.py: the same exchanges, queue arguments,
persistence, confirms and prefetches, no mesh logic), then the mesh with ``--agents`` agents
(bench/load_agents.py, 50 per `mesh worker` process) behind 1 and 2 routers, then the mesh
with ``--big-agents`` agents (real worker runtimes heartbeating, ``--big-per-process`` per
process). For each: open-loop offered load in steps (arrivals on a schedule, never waiting
for completions) until saturation, semantic and targeted, then the maximum sustained
throughput in a closed loop (``--in-flight`` outstanding, repeated ``--repeat-closed``
times: median [min-max]) and its ratio to the raw pipeline of the same run.

Per step: completed/s, success rate, end-to-end p50/p95/p99 (from the scheduled arrival),
routing overhead p50/p99 (`route.decision` events: ingress consumed -> dispatch confirmed)
and CPU ms per completed task of each process (registry, routers, workers, this client,
RabbitMQ, Redis). A table on stdout; JSON in ``bench/results/load-<UTC time>.json`` and
``bench/results/load-latest.json``; a progress line per step on stderr; children's stderr
in ``/tmp/bench-load-<namespace>/``.

Usage::

    bash infra/bench.sh load                     # the full run (about half an hour)
    .venv/bin/python bench/load.py --agents 20 --steps 50,100 --step-s 5 --big-agents 0
    .venv/bin/python bench/load.py --tiny        # a smoke run (< 1 min)
    .venv/bin/python bench/load.py --metrics on,off ...   # the cost of /metrics, same run
    .venv/bin/python bench/load.py --access off,on ...    # the cost of access control
    .venv/bin/python bench/load.py --agents 100 --steps 100 --step-s 5 --closed-s 10 \
        --big-agents 0 --idle-s 30       # the CPU budget's point, idle included (< 10 min)

After the tables, one per component (bench/load_components.py) for every closed-loop
point: CPU ms per task of the client, each router and the routers summed, the workers
summed, the registry, RabbitMQ and Redis against the CPU budget; AMQP messages published
per task by each of them (bench/brokerstat.py: the management API's per-channel counters,
read once the broker caught up, about 7 s after each run); Redis commands and socket reads
per task (the whole server's). ``--idle-s N``: each mesh process's CPU in cores over N
seconds, starting 5 s after the load stopped, once per router count.

``--access off,on`` measures one mesh without access control and one with it, in that
order (``off,on,off,on``: each twice, alternating, the runs of each pooled, so a drift of
the machine falls on both; bench/load_access.py): the second in a throwaway vhost provisioned as
``mesh access provision --create-vhost --keep-guest --keep-redis-default`` would (guest and
Redis' ``default`` user untouched), every process with its role's login,
``MESH_ACCESS_CONTROL=true`` and ``MESH_TOPOLOGY=passive``; the vhost, its users and their
Redis ACL users are deleted afterwards. Both meshes host their agents in
bench/load_logins.py processes, one connection per agent (an agent's login is its own), so
they differ only by access control; the table ends with their ratio.

``--metrics on,off`` measures one mesh with ``MESH_METRICS_PORT=0`` in every process and
one without, in that order, and prints the ratio of their closed-loop medians; the routers'
endpoints are scraped at the end of the run (their dispatch count is in the JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from aio_pika.abc import AbstractIncomingMessage
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import brokerstat, procstat  # noqa: E402
from bench.load_access import CLIENT, Tenant, provisioned  # noqa: E402
from bench.load_agents import agent_ids, intent_ids, queries  # noqa: E402
from bench.load_components import component_rows, component_table, idle_table  # noqa: E402
from mesh.access.roles import Role  # noqa: E402
from mesh.client import MeshClient  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.connection import MeshConnection, connect  # noqa: E402
from mesh.errors import ServiceUnavailable  # noqa: E402
from mesh.management import Management  # noqa: E402
from mesh.registry.state import load_state  # noqa: E402
from mesh.schemas import InvalidEnvelope, Result, TaskEnvelope, new_id, now_ms  # noqa: E402
from mesh.topology import REDACTED_DECISION_KEY  # noqa: E402
from mesh.wire import events_of  # noqa: E402

MESH = str(ROOT / ".venv" / "bin" / "mesh")
PYTHON = str(ROOT / ".venv" / "bin" / "python")
TASK_TIMEOUT_MS = 30_000
AGENTS_PER_WORKER = 50
SATURATION_RATIO = 0.9
SATURATION_P99_MS = 5_000.0
STOP_GRACE_S = 30.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- children --------------------------------------------------------------------------------
class Children:
    """The processes of one configuration; stdout and stderr of each in files under
    `log_dir`; `env` is added to every child's environment."""

    def __init__(self, namespace: str, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.namespace = namespace
        self.log_dir = log_dir
        self.env = env or {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        log_dir.mkdir(parents=True, exist_ok=True)

    def spawn(self, name: str, cmd: list[str], extra_env: dict[str, str] | None = None) -> None:
        env = {**os.environ, "MESH_NAMESPACE": self.namespace, **self.env, **(extra_env or {})}
        with (
            (self.log_dir / f"{name}.out").open("ab") as out,
            (self.log_dir / f"{name}.err").open("ab") as err,
        ):
            self.procs[name] = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=err)

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.procs.items()}

    def check_alive(self) -> None:
        dead = {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}
        if dead:
            raise RuntimeError(f"child process(es) exited: {dead}; see {self.log_dir}")

    def stop(self) -> None:
        procstat.stop_all(self.procs.values(), STOP_GRACE_S)
        self.procs.clear()


def worker_slices(n: int, per_process: int) -> list[str]:
    """START:STOP slices of `n` agents, at most `per_process` each, as even as possible."""
    count = max(1, math.ceil(n / per_process))
    bounds = [round(i * n / count) for i in range(count + 1)]
    return [f"{a}:{b}" for a, b in itertools.pairwise(bounds) if b > a]


def external_pids(redis_pid: int | None) -> dict[str, int]:
    found: dict[str, int] = {"client": os.getpid()}
    broker = procstat.broker_pid()
    if broker is not None:
        found["rabbitmq"] = broker
    if redis_pid is not None:
        found["redis"] = redis_pid
    return found


async def redis_pid(conn: MeshConnection) -> int | None:
    info = await conn.redis.info("server")
    pid = info.get("process_id")
    return int(pid) if pid is not None else None


# --- the client side -------------------------------------------------------------------------
@dataclass(slots=True)
class Pending:
    scheduled: float
    deadline: float
    sent: float | None = None
    done: float | None = None
    status: str | None = None
    future: asyncio.Future[Result] | None = None


class BenchClient(MeshClient):
    """A MeshClient that records when each Result arrives (publishing is MeshClient's)."""

    def __init__(self, conn: MeshConnection) -> None:
        super().__init__(conn, on_result=self._arrived)
        self.pending: dict[str, Pending] = {}

    def _arrived(self, result: Result) -> None:
        entry = self.pending.get(result.task_id)
        if entry is not None and entry.done is None:
            entry.done, entry.status = time.perf_counter(), result.status
            if entry.future is not None and not entry.future.done():
                entry.future.set_result(result)


class RouteTap:
    """Collects `route.decision` events: route_ms and index size by task_id."""

    def __init__(self, conn: MeshConnection) -> None:
        self.conn = conn
        self.route_ms: dict[str, float] = {}
        self.index_sizes: dict[str, int] = {}

    async def start(self) -> None:
        channel = await self.conn.channel(confirms=False, prefetch=2_000)
        queue = await channel.declare_queue(
            f"{self.conn.settings.namespace}.benchtap.{new_id()[:8]}",
            exclusive=True,
            auto_delete=True,
        )
        await queue.bind(self.conn.topology.events, routing_key="route.decision")
        # under access control routers send decisions without the request's text there
        await queue.bind(self.conn.topology.events, routing_key=REDACTED_DECISION_KEY)
        await queue.consume(self._on_event, no_ack=True)

    async def _on_event(self, message: AbstractIncomingMessage) -> None:
        try:
            events = events_of(message)  # one, or a batch
        except InvalidEnvelope:
            return
        for event in events:
            task_id, data = event.task_id, event.data
            if not task_id:
                continue
            route_ms = (data.get("timings") or {}).get("route_ms")
            if isinstance(route_ms, int | float):
                self.route_ms[task_id] = float(route_ms)
            if isinstance(data.get("agents"), int):
                self.index_sizes[task_id] = data["agents"]


class Load:
    """Makes envelopes for one mode and sends them through a BenchClient."""

    def __init__(self, client: BenchClient, mode: str, targets: Sequence[str]) -> None:
        self.client = client
        self.mode = mode
        self.targets = list(targets)
        self._texts: Iterator[str] = queries(intent_ids(0, len(self.targets)))
        self._n = 0

    def envelope(self) -> TaskEnvelope:
        self._n += 1
        target = self.targets[self._n % len(self.targets)] if self.mode == "target" else None
        return TaskEnvelope(capability=next(self._texts), target=target, timeout_ms=TASK_TIMEOUT_MS)

    def track(self, envelope: TaskEnvelope, scheduled: float) -> Pending:
        entry = Pending(scheduled, scheduled + TASK_TIMEOUT_MS / 1000.0)
        self.client.pending[envelope.task_id] = entry
        return entry

    async def send(self, envelope: TaskEnvelope, entry: Pending) -> None:
        entry.sent = time.perf_counter()
        try:
            await self.client.submit(envelope)
        except Exception as exc:  # a failed publish is a failed task, not a crashed bench
            entry.status = entry.status or f"publish:{type(exc).__name__}"
            entry.done = entry.done or time.perf_counter()


# --- measuring -------------------------------------------------------------------------------
@dataclass(slots=True)
class Row:
    """One measured point (an open-loop step or a closed-loop run)."""

    config: str
    kind: str
    agents: int
    routers: int
    mode: str
    offered_per_s: float | None
    duration_s: float
    sent: int
    completed: int
    failed: int
    completed_per_s: float
    success_rate: float
    e2e_ms: dict[str, float | None]
    route_ms: dict[str, float | None]
    cpu_ms_per_task: dict[str, float | None]
    statuses: dict[str, int] = field(default_factory=dict)
    result_timings_ms: dict[str, float] = field(default_factory=dict)
    #: how late publishes started against their schedule (open loop)
    send_lag_ms: dict[str, float | None] = field(default_factory=dict)
    #: completed/s of every repetition of this point (`--repeat`); this row is the median one
    repeats_per_s: list[float] = field(default_factory=list)
    #: closed loop: AMQP messages published per task, by process (brokerstat.published)
    amqp_per_task: dict[str, float] = field(default_factory=dict)
    #: closed loop: Redis counters per task, whole server (brokerstat.redis_counters)
    redis_per_task: dict[str, float] = field(default_factory=dict)


def percentiles(values: Sequence[float], qs: Sequence[int]) -> dict[str, float | None]:
    if not values:
        return {f"p{q}": None for q in qs}
    arr = np.asarray(values, dtype=float)
    return {f"p{q}": round(float(np.percentile(arr, q)), 2) for q in qs}


def cpu_per_task(spent: dict[str, float], completed: int) -> dict[str, float | None]:
    if completed <= 0:
        return {**{name: None for name in spent}, "total": None}
    per = {name: round(secs * 1000 / completed, 3) for name, secs in sorted(spent.items())}
    return {**per, "total": round(sum(spent.values()) * 1000 / completed, 3)}


@dataclass(slots=True)
class Scenario:
    """What is being measured: names for the rows and the processes to meter."""

    config: str
    kind: str
    agents: int
    routers: int
    pids: Callable[[], dict[str, int]]
    conn: MeshConnection | None = None
    #: time.monotonic() when the last load on this mesh stopped (broker counters lag it)
    quiet_since: float = field(default_factory=time.monotonic)


def summarise(
    sc: Scenario,
    mode: str,
    entries: dict[str, Pending],
    tap: RouteTap,
    offered: float | None,
    window: tuple[float, float],
    spent: dict[str, float],
    result_timings: dict[str, list[float]],
) -> Row:
    start, end = window
    good = {t: e for t, e in entries.items() if e.status == "completed" and e.done is not None}
    good = {t: e for t, e in good.items() if e.done is not None and e.done <= e.deadline}
    ok = good
    if offered is not None:  # open loop: the step and the draining of its stragglers
        last = max((e.done or start for e in ok.values()), default=end)
        duration = max(end - start, last - start)
    else:  # closed loop: the rate counts completions inside the window
        duration = end - start
        ok = {t: e for t, e in good.items() if e.done is not None and e.done <= end}
    statuses: dict[str, int] = {}
    for e in entries.values():
        key = e.status or "no result"
        statuses[key] = statuses.get(key, 0) + 1
    e2e = [((e.done or 0) - e.scheduled) * 1000 for e in ok.values()]
    routes = [tap.route_ms[t] for t in ok if t in tap.route_ms]
    sent = sum(1 for e in entries.values() if e.sent is not None)
    lags = [((e.sent or 0) - e.scheduled) * 1000 for e in entries.values() if e.sent is not None]
    return Row(
        config=sc.config,
        kind=sc.kind,
        agents=sc.agents,
        routers=sc.routers,
        mode=mode,
        offered_per_s=offered,
        duration_s=round(duration, 3),
        sent=sent,
        completed=len(ok),
        failed=len(entries) - len(good),
        completed_per_s=round(len(ok) / duration, 2) if duration > 0 else 0.0,
        success_rate=round(len(good) / len(entries), 4) if entries else 0.0,
        e2e_ms=percentiles(e2e, (50, 95, 99)),
        route_ms=percentiles(routes, (50, 99)),
        # closed loop: the CPU of the tasks finishing after the window is counted too
        cpu_ms_per_task=cpu_per_task(spent, len(ok) if offered is not None else len(good)),
        statuses=statuses,
        result_timings_ms={k: round(statistics.median(v), 3) for k, v in result_timings.items()},
        send_lag_ms=percentiles(lags, (50, 99)) if offered is not None else {},
    )


async def wait_resolved(entries: dict[str, Pending], grace_s: float = 1.0) -> None:
    """Until every entry has its Result or is past its deadline."""
    while True:
        now = time.perf_counter()
        open_ = [e for e in entries.values() if e.done is None and now < e.deadline + grace_s]
        if not open_:
            return
        await asyncio.sleep(0.05)


async def open_step(load: Load, sc: Scenario, tap: RouteTap, rate: float, step_s: float) -> Row:
    """Offer `rate` tasks/s for `step_s` seconds on a fixed schedule, then drain."""
    n = max(1, round(rate * step_s))
    entries: dict[str, Pending] = {}
    sends: set[asyncio.Task[None]] = set()
    cpu0 = procstat.snapshot(sc.pids())
    t0 = time.perf_counter() + 0.05
    for i in range(n):
        scheduled = t0 + i / rate
        delay = scheduled - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        envelope = load.envelope()
        entries[envelope.task_id] = entry = load.track(envelope, scheduled)
        task = asyncio.create_task(load.send(envelope, entry))
        sends.add(task)
        task.add_done_callback(sends.discard)
    end = time.perf_counter()
    await wait_resolved(entries)
    await asyncio.gather(*sends, return_exceptions=True)
    spent = procstat.delta(cpu0, procstat.snapshot(sc.pids()))
    sc.quiet_since = time.monotonic()
    row = summarise(sc, load.mode, entries, tap, rate, (t0, max(end, t0 + step_s)), spent, {})
    forget(load.client, entries)
    return row


async def closed_run(load: Load, sc: Scenario, tap: RouteTap, in_flight: int, run_s: float) -> Row:
    """`in_flight` tasks outstanding for `run_s` seconds: the sustained throughput."""
    entries: dict[str, Pending] = {}
    timings: dict[str, list[float]] = {}
    loop = asyncio.get_running_loop()
    counters0 = await Counters.read(sc, settle=True)
    cpu0 = procstat.snapshot(sc.pids())
    start = time.perf_counter()
    end = start + run_s

    async def lane() -> None:
        while time.perf_counter() < end:
            envelope = load.envelope()
            entries[envelope.task_id] = entry = load.track(envelope, time.perf_counter())
            entry.future = loop.create_future()
            await load.send(envelope, entry)
            try:
                result = await asyncio.wait_for(entry.future, entry.deadline - time.perf_counter())
            except TimeoutError:
                continue
            for key, value in result.timings.items():
                timings.setdefault(key, []).append(value)

    await asyncio.gather(*(lane() for _ in range(in_flight)))
    spent = procstat.delta(cpu0, procstat.snapshot(sc.pids()))
    counters1 = await Counters.read(sc, settle=False)
    sc.quiet_since = time.monotonic()
    counters1.published = (await Counters.read(sc, settle=True)).published
    row = summarise(sc, load.mode, entries, tap, None, (start, end), spent, timings)
    counters0.per_task(counters1, len(entries), row)
    forget(load.client, entries)
    return row


@dataclass(slots=True)
class Counters:
    """AMQP publishes by process and Redis counters at one moment (`brokerstat`)."""

    #: None: the management API did not answer (the run has no AMQP figures)
    published: dict[str, int] | None
    redis: dict[str, int]

    @classmethod
    async def read(cls, sc: Scenario, *, settle: bool) -> Counters:
        """Redis now; the broker's counters now or, `settle`, once they caught up with the
        last load (`sc.quiet_since`)."""
        if sc.conn is None:
            return cls({}, {})
        settings, ns = sc.conn.settings, sc.conn.settings.namespace
        if settle:
            by_pid = await brokerstat.settled_published(settings, ns, sc.quiet_since)
        else:
            by_pid = await brokerstat.published_now(settings, ns)
        redis = await brokerstat.redis_counters(sc.conn.redis)
        named = None if by_pid is None else brokerstat.by_name(by_pid, sc.pids())
        return cls(named, redis)

    def per_task(self, after: Counters, tasks: int, row: Row) -> None:
        """Fill `row`'s counters per task: `after` - self over `tasks` tasks sent."""
        if tasks <= 0:
            return
        if self.published is not None and after.published is not None:
            amqp = brokerstat.count_delta(self.published, after.published)
            row.amqp_per_task = {k: round(v / tasks, 3) for k, v in sorted(amqp.items())}
            row.amqp_per_task["total"] = round(sum(amqp.values()) / tasks, 3)
        else:
            log("  the management API did not answer: no AMQP counts for this run")
        redis = brokerstat.count_delta(self.redis, after.redis)
        row.redis_per_task = {k: round(v / tasks, 3) for k, v in redis.items() if v > 0}


def forget(client: BenchClient, entries: dict[str, Pending]) -> None:
    for task_id in entries:
        client.pending.pop(task_id, None)


def saturated(row: Row) -> bool:
    offered = row.offered_per_s or 0.0
    p99 = row.e2e_ms.get("p99")
    return row.completed_per_s < SATURATION_RATIO * offered or (
        p99 is not None and p99 > SATURATION_P99_MS
    )


@dataclass(slots=True)
class Closed:
    """A closed-loop point repeated: the median and range of completed/s."""

    config: str
    kind: str
    agents: int
    routers: int
    mode: str
    runs: list[Row]
    median_per_s: float
    min_per_s: float
    max_per_s: float
    ratio_to_raw: float | None = None
    raw_median_per_s: float | None = None


async def measure(
    load: Load, sc: Scenario, tap: RouteTap, args: argparse.Namespace
) -> tuple[list[Row], Closed]:
    """The open-loop steps (until saturation), then the repeated closed loop."""
    rows: list[Row] = []
    for rate in args.steps:
        row = median_row(
            [await open_step(load, sc, tap, float(rate), args.step_s) for _ in range(args.repeat)]
        )
        rows.append(row)
        log(f"  {step_line(row)}")
        if saturated(row):
            log(f"  {sc.config} {load.mode}: saturated at {rate}/s offered")
            break
    runs = []
    for i in range(args.repeat_closed):
        run = await closed_run(load, sc, tap, args.in_flight, args.closed_s)
        runs.append(run)
        log(f"  closed #{i + 1}: {step_line(run)}")
        await asyncio.sleep(0)
    rates = [r.completed_per_s for r in runs]
    closed = Closed(
        sc.config,
        sc.kind,
        sc.agents,
        sc.routers,
        load.mode,
        runs,
        round(statistics.median(rates), 2),
        min(rates),
        max(rates),
    )
    return rows, closed


def merged_closed(closed: list[Closed]) -> list[Closed]:
    """One `Closed` per (config, mode): the runs of a configuration measured more than once
    (``--access off,on,off,on``: the meshes alternate, so a drift of the machine falls on
    both) are pooled, their median and range taken over all of them, in first-seen order."""
    pooled: dict[tuple[str, str], Closed] = {}
    for c in closed:
        first = pooled.get((c.config, c.mode))
        if first is None:
            pooled[(c.config, c.mode)] = replace(c, runs=list(c.runs))
            continue
        first.runs.extend(c.runs)
        rates = [r.completed_per_s for r in first.runs]
        first.median_per_s = round(statistics.median(rates), 2)
        first.min_per_s, first.max_per_s = min(rates), max(rates)
    return list(pooled.values())


def median_row(runs: list[Row]) -> Row:
    """The run of median completed/s, carrying every run's completed/s."""
    ordered = sorted(runs, key=lambda r: r.completed_per_s)
    middle = ordered[(len(ordered) - 1) // 2]
    middle.repeats_per_s = [r.completed_per_s for r in runs]
    return middle


def step_line(row: Row) -> str:
    offered = "closed" if row.offered_per_s is None else f"{row.offered_per_s:.0f}/s"
    return (
        f"{row.config} {row.mode} {offered}: {row.completed_per_s:.1f}/s done, "
        f"{row.success_rate * 100:.1f}% ok, p50 {fmt(row.e2e_ms['p50'])} "
        f"p99 {fmt(row.e2e_ms['p99'])} ms, route p50 {fmt(row.route_ms['p50'])} ms, "
        f"cpu {fmt(row.cpu_ms_per_task.get('total'))} ms/task"
    )


def spread(values: Sequence[float]) -> str:
    return "-" if len(values) < 2 else f"[{min(values):.0f}-{max(values):.0f}]"


def fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


# --- bringing a configuration up -------------------------------------------------------------
async def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, children: Children
) -> None:
    """Poll `predicate` (maybe async) until truthy; a child dying or the deadline raises."""
    end = time.monotonic() + timeout
    while True:
        children.check_alive()
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
        await asyncio.sleep(0.25)


async def consumers(conn: MeshConnection, queue: str) -> int:
    channel = await conn.channel(confirms=False)
    try:
        declared = await channel.declare_queue(queue, passive=True)
        count = declared.declaration_result.consumer_count
        return int(count or 0)
    except Exception:
        return 0
    finally:
        if not channel.is_closed:
            await channel.close()


async def live_agents(conn: MeshConnection) -> int:
    state = await load_state(conn.redis, conn.keys)
    now = now_ms()
    return sum(1 for a in state.values() if a.is_live(now))


async def probe(client: BenchClient, tap: RouteTap, load: Load, n_agents: int) -> bool:
    """A targeted and a semantic request both complete, the latter routed over every agent."""
    target = TaskEnvelope(capability="probe", target=load.targets[0], timeout_ms=10_000)
    semantic = TaskEnvelope(capability="how do i freeze my bank account", timeout_ms=10_000)
    done = await asyncio.gather(
        *(client.send(e, wait_s=15) for e in (target, semantic)), return_exceptions=True
    )
    if not all(isinstance(r, Result) and r.status == "completed" for r in done):
        return False
    seen = tap.index_sizes.get(semantic.task_id)
    return seen is None or seen >= n_agents


async def warm_up(client: BenchClient, targets: Sequence[str]) -> None:
    """One targeted request per 10 agents (first dispatches, caches, channels)."""
    picks = list(targets)[::10] or list(targets)
    await asyncio.gather(
        *(client.request("warm up", target=t, timeout_ms=20_000, wait_s=30) for t in picks),
        return_exceptions=True,
    )


#: `--router-code`: another checkout whose router runs instead (before/after comparisons)
ROUTER_CODE: str | None = None


def router_env() -> dict[str, str]:
    """Routers fall back to the first agent (as a deployment would), so a query below the
    similarity threshold still completes and the load stays on the routed path."""
    env = {"MESH_FALLBACK_AGENT": agent_ids(0, 1)[0]}
    if ROUTER_CODE:
        env["PYTHONPATH"] = ROUTER_CODE
    return env


def start_mesh_workers(children: Children, n: int, per_process: int, handler_ms: float) -> None:
    env = {"LOAD_HANDLER_MS": str(handler_ms)} if handler_ms else {}
    for i, piece in enumerate(worker_slices(n, per_process)):
        children.spawn(
            f"worker{i}",
            [MESH, "worker", "bench.load_agents:agents", "--app-dir", str(ROOT)],
            {**env, "LOAD_AGENTS": piece},
        )


def start_login_workers(
    children: Children, n: int, per_process: int, handler_ms: float, tenant: Tenant | None
) -> None:
    """`--access`: bench/load_logins.py processes, one connection per agent, each agent
    under its ``worker.<agent_id>`` login (`tenant`) or all on the environment's (None)."""
    env = {"LOAD_HANDLER_MS": str(handler_ms)} if handler_ms else {}
    if tenant is not None:
        path = children.log_dir / "logins.json"
        env["LOAD_LOGINS"] = str(tenant.write_logins(path, agent_ids(0, n)))
        env.update(MESH_ACCESS_CONTROL="true", MESH_TOPOLOGY="passive")
    for i, piece in enumerate(worker_slices(n, per_process)):
        children.spawn(
            f"worker{i}",
            [PYTHON, str(ROOT / "bench" / "load_logins.py")],
            {**env, "LOAD_AGENTS": piece},
        )


def spawn_raw_router(children: Children, i: int, n: int, ready: Path) -> None:
    """Raw router number `i` over agents 0..n, touching `ready` once it consumes."""
    cmd = [PYTHON, str(ROOT / "bench" / "raw_pipeline.py"), "router"]
    cmd += ["--namespace", children.namespace, "--agents", f"0:{n}", "--ready", str(ready)]
    children.spawn(f"router{i}", cmd)


def start_raw(children: Children, n: int, routers: int, ready_dir: Path) -> list[Path]:
    ready = []
    for i in range(routers):
        path = ready_dir / f"raw-router{i}.ready"
        ready.append(path)
        spawn_raw_router(children, i, n, path)
    for i, piece in enumerate(worker_slices(n, AGENTS_PER_WORKER)):
        path = ready_dir / f"raw-worker{i}.ready"
        ready.append(path)
        children.spawn(
            f"worker{i}",
            [
                PYTHON,
                str(ROOT / "bench" / "raw_pipeline.py"),
                "worker",
                "--namespace",
                children.namespace,
                "--agents",
                piece,
                "--ready",
                str(path),
            ],
        )
    return ready


async def cleanup(settings: Settings) -> None:
    ns = settings.namespace
    try:
        await asyncio.to_thread(Management(settings).purge_namespace, ns)
    except Exception as exc:
        log(f"purging {ns} failed: {exc!r}")
    try:
        async with await connect(settings, name="bench-load-cleanup") as conn:
            keys = [k async for k in conn.redis.scan_iter(match=f"{ns}:*", count=1000)]
            for i in range(0, len(keys), 1000):
                await conn.redis.delete(*keys[i : i + 1000])
    except Exception as exc:  # cleaning up must not hide what went wrong before
        log(f"deleting the Redis keys of {ns} failed: {exc!r}")


@dataclass(slots=True)
class Outcome:
    open_rows: list[Row] = field(default_factory=list)
    closed: list[Closed] = field(default_factory=list)
    #: `--metrics on`: dispatches the routers' /metrics endpoints served, by config
    scraped_dispatches: dict[str, float] = field(default_factory=dict)
    #: `--idle-s`: each mesh process's CPU once the load stopped, by config
    idle: list[Idle] = field(default_factory=list)


#: what a `mesh router` prints when its metrics are on (`mesh.cli.run.with_metrics`)
METRICS_LINE = "router metrics on "


def scrape_dispatches(children: Children) -> float:
    """Dispatches counted by every router's /metrics endpoint (URLs from their stdout)."""
    total = 0.0
    for name in children.procs:
        out = children.log_dir / f"{name}.out"
        if not name.startswith("router") or not out.exists():
            continue
        for line in out.read_text().splitlines():
            if line.startswith(METRICS_LINE):
                url = line[len(METRICS_LINE) :].strip()
                with urllib.request.urlopen(url, timeout=10) as answer:
                    text = answer.read().decode()
                for fam in text_string_to_metric_families(text):
                    if fam.name == "agent_reach_dispatches":
                        total += sum(s.value for s in fam.samples if s.name.endswith("_total"))
    return total


def config_name(
    kind: str, n_agents: int, routers: int, metrics: str | None, access: str | None = None
) -> str:
    base = f"{kind} n{n_agents} r{routers}"
    base = base if metrics is None else f"{base} m-{metrics}"
    return base if access is None else f"{base} ac-{access}"


def role_env(tenant: Tenant | None, role: Role) -> dict[str, str]:
    """The login of a mesh process of `role` under access control (none without)."""
    return {} if tenant is None else tenant.env(role)


async def run_config(
    kind: str,
    n_agents: int,
    router_counts: Sequence[int],
    modes: Sequence[str],
    args: argparse.Namespace,
    outcome: Outcome,
    metrics: str | None = None,
    access: str | None = None,
) -> None:
    """One namespace: its processes up, every mode x router count measured, torn down.

    `metrics` ``on``: every mesh process serves /metrics (``MESH_METRICS_PORT=0``); ``off``
    or None: none does (None: `--metrics` was not asked for, the names stay as they were).
    `access` ``on``: every process under its provisioned role (bench/load_access.py);
    ``on`` or ``off``: the workers are bench/load_logins.py processes (a connection per
    agent, each agent under its own login when on).
    """
    settings = Settings.from_env(namespace=f"{'raw' if kind == 'raw' else 'bench'}-{new_id()[:8]}")
    log_dir = Path(f"/tmp/bench-load-{settings.namespace}")
    env = {} if metrics is None else {"MESH_METRICS_PORT": "0" if metrics == "on" else ""}
    children = Children(settings.namespace, log_dir, env)
    log(f"{kind} with {n_agents} agents: namespace {settings.namespace}, logs in {log_dir}")
    targets = agent_ids(0, n_agents)
    try:
        async with contextlib.AsyncExitStack() as stack:
            tenant = None
            if access == "on":
                tenant = await stack.enter_async_context(provisioned(settings, targets))
                log(f"  access control on: vhost {tenant.scope.vhost}, {len(tenant.creds)} users")
            # `conn`: the shared logins (CPU pids, Redis INFO, the management API);
            # `mesh_conn`: the mesh's keys and events (the admin under access control)
            conn = await stack.enter_async_context(await connect(settings, name="bench-load"))
            mesh_conn, client_conn = conn, conn
            if tenant is not None:
                mesh_conn = await stack.enter_async_context(
                    await connect(tenant.settings(Role("admin")), name="bench-load-admin")
                )
                client_conn = await stack.enter_async_context(
                    await connect(tenant.settings(Role("client", CLIENT)), name="bench-load-client")
                )
            others = external_pids(await redis_pid(conn))
            await bring_up(kind, n_agents, children, mesh_conn, args, log_dir, access, tenant)
            client = BenchClient(client_conn)
            async with client:
                tap = RouteTap(mesh_conn)
                await tap.start()
                await ready_to_route(kind, client, tap, targets, children, args)
                for routers in router_counts:
                    await add_routers(kind, routers, n_agents, children, mesh_conn, log_dir, tenant)
                    sc = Scenario(
                        config_name(kind, n_agents, routers, metrics, access),
                        kind,
                        n_agents,
                        routers,
                        lambda: {**children.pids(), **others},
                        conn,
                    )
                    for mode in modes:
                        log(f"{sc.config} {mode}:")
                        rows, closed = await measure(Load(client, mode, targets), sc, tap, args)
                        outcome.open_rows += rows
                        outcome.closed.append(closed)
                    if args.idle_s > 0 and kind != "raw":
                        outcome.idle.append(await measure_idle(sc, args.idle_s))
                    if metrics == "on":
                        count = await asyncio.to_thread(scrape_dispatches, children)
                        outcome.scraped_dispatches[sc.config] = count
                        log(f"  {sc.config}: the routers' /metrics served {count:.0f} dispatches")
            children.stop()  # before the tenant's users and vhost go
    finally:
        children.stop()
        await cleanup(settings)


#: how long after the load stops an idle mesh is measured (the idle budget's "within 5 s")
IDLE_AFTER_S = 5.0


@dataclass(slots=True)
class Idle:
    """CPU cores each process used over `seconds`, starting IDLE_AFTER_S after the load."""

    config: str
    seconds: float
    cores: dict[str, float]


async def measure_idle(sc: Scenario, seconds: float) -> Idle:
    await asyncio.sleep(max(0.0, sc.quiet_since + IDLE_AFTER_S - time.monotonic()))
    log(f"{sc.config}: idle for {seconds:.0f}s")
    cpu0 = procstat.snapshot(sc.pids())
    started = time.monotonic()
    await asyncio.sleep(seconds)
    spent = procstat.delta(cpu0, procstat.snapshot(sc.pids()))
    elapsed = time.monotonic() - started
    idle = Idle(sc.config, round(elapsed, 2), {k: round(v / elapsed, 4) for k, v in spent.items()})
    log(f"  idle cores: {idle.cores}")
    return idle


async def bring_up(
    kind: str,
    n_agents: int,
    children: Children,
    conn: MeshConnection,
    args: argparse.Namespace,
    log_dir: Path,
    access: str | None = None,
    tenant: Tenant | None = None,
) -> None:
    if kind == "raw":
        ready = start_raw(children, n_agents, 1, log_dir)
        await wait_for(lambda: all(p.exists() for p in ready), 120, "raw pipeline up", children)
        return
    children.spawn("registry", [MESH, "registry"], role_env(tenant, Role("registry")))
    children.spawn(
        "router0", [MESH, "router"], {**router_env(), **role_env(tenant, Role("router"))}
    )
    per_process = AGENTS_PER_WORKER if n_agents <= 150 else args.big_per_process
    if access is None:
        start_mesh_workers(children, n_agents, per_process, args.handler_ms)
    else:
        start_login_workers(children, n_agents, per_process, args.handler_ms, tenant)
    started = time.monotonic()
    await wait_for(
        lambda: _at_least(live_agents(conn), n_agents), 600, f"{n_agents} live agents", children
    )
    log(f"  {n_agents} agents live after {time.monotonic() - started:.1f}s")


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count >= n)


async def ready_to_route(
    kind: str,
    client: BenchClient,
    tap: RouteTap,
    targets: Sequence[str],
    children: Children,
    args: argparse.Namespace,
) -> None:
    await warm_up(client, targets)
    load = Load(client, "target", targets)
    await wait_for(
        lambda: probe(client, tap, load, len(targets)), 300, "routable (probe)", children
    )


async def add_routers(
    kind: str,
    routers: int,
    n_agents: int,
    children: Children,
    conn: MeshConnection,
    log_dir: Path,
    tenant: Tenant | None = None,
) -> None:
    """Start routers until `routers` consume the router queue."""
    have = sum(1 for name in children.procs if name.startswith("router"))
    for i in range(have, routers):
        if kind == "raw":
            path = log_dir / f"raw-router{i}.ready"
            spawn_raw_router(children, i, n_agents, path)
        else:
            login = role_env(tenant, Role("router"))
            children.spawn(f"router{i}", [MESH, "router"], {**router_env(), **login})
    queue = conn.topology.router_queue
    await wait_for(
        lambda: _at_least(consumers(conn, queue), routers), 300, f"{routers} routers", children
    )


# --- reporting -------------------------------------------------------------------------------
PROCESS_ORDER = ("client", "registry", "router", "worker", "rabbitmq", "redis", "total")


def cpu_columns(rows: Sequence[Row]) -> list[str]:
    """Process groups shown (routers and workers summed by kind), those measured."""
    seen = {group for r in rows for group in grouped_cpu(r)}
    return [c for c in PROCESS_ORDER if c in seen]


def grouped_cpu(row: Row) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for name, value in row.cpu_ms_per_task.items():
        group = name.rstrip("0123456789")
        if value is None:
            out.setdefault(group, None)
            continue
        out[group] = (out.get(group) or 0.0) + value
    return out


def table(outcome: Outcome) -> str:
    cols = cpu_columns(outcome.open_rows)
    head = (
        f"{'config':18s} {'mode':8s} {'offered':>7s} {'done/s':>7s} {'range':>13s} {'ok%':>6s} "
        f"{'p50':>7s} {'p95':>7s} {'p99':>7s} {'rt50':>6s} {'rt99':>6s} | "
        + " ".join(f"{c[:8]:>8s}" for c in cols)
    )
    lines = [
        "open loop: e2e p50/p95/p99 and route (rt) p50/p99 in ms | CPU ms per completed task",
        head,
        "-" * len(head),
    ]
    for r in outcome.open_rows:
        cpu = grouped_cpu(r)
        lines.append(
            f"{r.config:18s} {r.mode:8s} {r.offered_per_s or 0:7.0f} {r.completed_per_s:7.1f} "
            f"{spread(r.repeats_per_s):>13s} {r.success_rate * 100:6.1f} "
            f"{fmt(r.e2e_ms['p50']):>7s} {fmt(r.e2e_ms['p95']):>7s} "
            f"{fmt(r.e2e_ms['p99']):>7s} {fmt(r.route_ms['p50'], 2):>6s} "
            f"{fmt(r.route_ms['p99'], 2):>6s} | "
            + " ".join(f"{fmt(cpu.get(c), 2):>8s}" for c in cols)
        )
    lines += ["", "closed loop (completed/s: median [min-max] of the runs)"]
    head2 = (
        f"{'config':18s} {'mode':8s} {'median':>8s} {'range':>17s} {'vs raw':>7s} "
        f"{'p50':>7s} {'p99':>7s} {'cpu/task':>9s}"
    )
    lines += [head2, "-" * len(head2)]
    costs = metrics_costs(outcome)
    for c in outcome.closed:
        mid = c.runs[len(c.runs) // 2]
        ratio = "-" if c.ratio_to_raw is None else f"{c.ratio_to_raw:.2f}"
        lines.append(
            f"{c.config:18s} {c.mode:8s} {c.median_per_s:8.1f} "
            f"{f'[{c.min_per_s:.1f}-{c.max_per_s:.1f}]':>17s} {ratio:>7s} "
            f"{fmt(mid.e2e_ms['p50']):>7s} {fmt(mid.e2e_ms['p99']):>7s} "
            f"{fmt(mid.cpu_ms_per_task.get('total'), 2):>9s}"
        )
    for (config, mode), (on, off) in costs.items():
        lines.append(
            f"metrics cost, {config} {mode}: on {on:.1f}/s vs off {off:.1f}/s = "
            f"{on / off:.3f} ({(1 - on / off) * 100:+.1f}% throughput lost)"
        )
    for (config, mode), (on_c, off_c) in access_costs(outcome).items():
        cpu_on, cpu_off = closed_cpu(on_c), closed_cpu(off_c)
        cpu = "" if not cpu_on or not cpu_off else f"; CPU/task {cpu_on / cpu_off - 1:+.1%}"
        lines.append(
            f"access control cost, {config} {mode}: on {on_c.median_per_s:.1f}/s "
            f"[{on_c.min_per_s:.1f}-{on_c.max_per_s:.1f}] vs off {off_c.median_per_s:.1f}/s "
            f"[{off_c.min_per_s:.1f}-{off_c.max_per_s:.1f}] = "
            f"{on_c.median_per_s / off_c.median_per_s:.3f}{cpu}"
        )
    return "\n".join(lines)


def access_costs(outcome: Outcome) -> dict[tuple[str, str], tuple[Closed, Closed]]:
    """(config without the access tag, mode) -> the closed loops with access on, off."""
    by = {(c.config, c.mode): c for c in outcome.closed}
    found = {}
    for (config, mode), on in by.items():
        if config.endswith(" ac-on"):
            base = config.removesuffix(" ac-on")
            off = by.get((f"{base} ac-off", mode))
            if off is not None and off.median_per_s:
                found[(base, mode)] = (on, off)
    return found


def closed_cpu(c: Closed) -> float | None:
    """The median of a closed loop's runs' total CPU ms per task."""
    values = [v for r in c.runs if (v := r.cpu_ms_per_task.get("total")) is not None]
    return statistics.median(values) if values else None


def metrics_costs(outcome: Outcome) -> dict[tuple[str, str], tuple[float, float]]:
    """(config without the metrics tag, mode) -> closed-loop medians with metrics on, off."""
    medians = {(c.config, c.mode): c.median_per_s for c in outcome.closed}
    found = {}
    for (config, mode), on in medians.items():
        if config.endswith(" m-on"):
            base = config.removesuffix(" m-on")
            off = medians.get((f"{base} m-off", mode))
            if off:
                found[(base, mode)] = (on, off)
    return found


def add_ratios(outcome: Outcome) -> None:
    """Each mesh closed loop against the raw pipeline with as many routers, same run."""
    raw = {c.routers: c.median_per_s for c in outcome.closed if c.kind == "raw"}
    for c in outcome.closed:
        if c.kind == "raw":
            continue
        base = raw.get(c.routers) or (next(iter(raw.values())) if raw else None)
        if base:
            c.raw_median_per_s = base
            c.ratio_to_raw = round(c.median_per_s / base, 3)


def write_json(outcome: Outcome, args: argparse.Namespace, started: str) -> Path:
    folder = Path(args.results_dir)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {
        "started_utc": started,
        "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "options": {k: v for k, v in vars(args).items() if k != "func"},
        "open_loop": [asdict(r) for r in outcome.open_rows],
        "closed_loop": [asdict(c) for c in outcome.closed],
        "components": [asdict(c) for c in component_rows(outcome.closed)],
        "idle": [asdict(i) for i in outcome.idle],
        "metrics": {
            "scraped_dispatches": outcome.scraped_dispatches,
            "cost": {
                f"{config} {mode}": {"on_per_s": on, "off_per_s": off, "ratio": round(on / off, 4)}
                for (config, mode), (on, off) in metrics_costs(outcome).items()
            },
        },
        "access": {
            f"{config} {mode}": {
                "on_per_s": on.median_per_s,
                "off_per_s": off.median_per_s,
                "ratio": round(on.median_per_s / off.median_per_s, 4),
                "on_cpu_ms_per_task": closed_cpu(on),
                "off_cpu_ms_per_task": closed_cpu(off),
            }
            for (config, mode), (on, off) in access_costs(outcome).items()
        },
    }
    body = json.dumps(doc, indent=1, default=str)
    path = folder / f"load-{started.replace(':', '')}.json"
    path.write_text(body)
    (folder / "load-latest.json").write_text(body)
    return path


# --- entry point -----------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--agents", type=int, default=100)
    p.add_argument("--routers", default="1,2", help="router counts to measure, e.g. 1,2")
    p.add_argument("--modes", default="semantic,target")
    p.add_argument("--steps", default="50,100,200,400,800,1600", help="offered tasks/s")
    p.add_argument("--step-s", type=float, default=20.0)
    p.add_argument("--closed-s", type=float, default=15.0)
    p.add_argument("--in-flight", type=int, default=100)
    p.add_argument("--repeat", type=int, default=1, help="runs of each open-loop step")
    p.add_argument("--repeat-closed", type=int, default=3, help="runs of each closed loop")
    p.add_argument("--big-agents", type=int, default=1000, help="0 skips the big case")
    p.add_argument("--big-per-process", type=int, default=250, help="agents per worker process")
    p.add_argument("--handler-ms", type=float, default=0.0, help="handler sleep (ms)")
    p.add_argument("--skip-raw", action="store_true")
    p.add_argument(
        "--metrics",
        default=None,
        help="on, off or on,off: the mesh's processes serve /metrics (MESH_METRICS_PORT=0) "
        "or not, one mesh each in this order (default: as the environment says)",
    )
    p.add_argument(
        "--access",
        default=None,
        help="on, off, off,on or off,on,off,on: the mesh's processes under access control, "
        "each with its provisioned role's login in a throwaway vhost (bench/load_access.py), "
        "or not, one mesh each in this order (a configuration listed twice: its closed-loop "
        "runs pooled); either way the workers are bench/load_logins.py processes "
        "with one connection per agent (default: as the environment says, `mesh worker`)",
    )
    p.add_argument(
        "--router-code",
        default=None,
        help="run the routers from this checkout (e.g. an older commit) to compare",
    )
    p.add_argument(
        "--idle-s",
        type=float,
        default=0.0,
        help="after each mesh configuration's modes, measure each process's CPU (cores) "
        f"over this many seconds, starting {IDLE_AFTER_S:.0f} s after the load stopped",
    )
    p.add_argument("--tiny", action="store_true", help="a smoke run of a few seconds a point")
    p.add_argument("--results-dir", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    if args.tiny:
        args.agents, args.routers, args.steps = 4, "1", "20"
        args.step_s, args.closed_s, args.repeat_closed, args.big_agents = 2.0, 2.0, 1, 0
        args.repeat = 1
        args.in_flight = min(args.in_flight, 20)
    args.router_counts = sorted({int(x) for x in args.routers.split(",") if x.strip()})
    args.mode_list = [m.strip() for m in args.modes.split(",") if m.strip()]
    args.steps = [float(x) for x in str(args.steps).split(",") if x.strip()]
    args.metrics_list = (
        [None] if args.metrics is None else [m.strip() for m in args.metrics.split(",")]
    )
    if not set(args.metrics_list) <= {None, "on", "off"} or not args.metrics_list:
        p.error(f"--metrics takes on, off or on,off (got {args.metrics})")
    args.access_list = (
        [None] if args.access is None else [a.strip() for a in args.access.split(",")]
    )
    if not set(args.access_list) <= {None, "on", "off"} or not args.access_list:
        p.error(
            f"--access takes on, off or both in the order to run them, e.g. off,on or "
            f"off,on,off,on (got {args.access})"
        )
    bad = set(args.mode_list) - {"semantic", "target"}
    if bad or not args.router_counts or min(args.router_counts) < 1:
        p.error(f"modes are semantic/target and routers >= 1 (got {args.modes}, {args.routers})")
    return args


async def run_all(args: argparse.Namespace) -> Outcome:
    outcome = Outcome()
    if not args.skip_raw:
        await run_config("raw", args.agents, args.router_counts, ["target"], args, outcome)
    for metrics in args.metrics_list:
        for access in args.access_list:
            modes = args.mode_list
            await run_config(
                "mesh", args.agents, args.router_counts, modes, args, outcome, metrics, access
            )
    outcome.closed = merged_closed(outcome.closed)
    if args.big_agents > 0:
        big_routers = args.router_counts[:1]
        await run_config(
            "mesh",
            args.big_agents,
            big_routers,
            args.mode_list,
            args,
            outcome,
            args.metrics_list[0],
            args.access_list[0],
        )
    return outcome


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    global ROUTER_CODE
    args = parse_args(argv)
    ROUTER_CODE = args.router_code
    # SIGTERM unwinds like Ctrl-C: the children are stopped and the namespace purged
    signal.signal(signal.SIGTERM, _interrupt)
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    try:
        outcome = asyncio.run(run_all(args))
    except ServiceUnavailable as exc:
        log(f"bench/load.py: {exc}")
        return 1
    add_ratios(outcome)
    print(table(outcome), flush=True)
    print("\n" + component_table(outcome.closed), flush=True)
    if outcome.idle:
        print("\n" + idle_table(outcome.idle, IDLE_AFTER_S), flush=True)
    path = write_json(outcome, args, started)
    log(f"results: {path}")
    with contextlib.suppress(OSError):
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
