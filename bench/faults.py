"""Fault benchmark: the mesh's own processes under open-loop load while parts of it fail.

Each run starts, in a fresh namespace, ``mesh registry`` (1, or 2 for registry-kill),
``mesh router`` (1, or 2 for router-kill) and one ``mesh worker bench.fault_agents:aNN``
process per instance (``--agents`` x ``--instances``), exactly as a user runs them. A
MeshClient submits targeted (or ``--mode semantic``) tasks on a fixed schedule, never
waiting for completions, and collects every Result; a fault is injected on a timetable:

- ``kill30``: SIGKILL of ``--kill-share`` (30 %) of the worker instances at ``--kill-at``,
  the same slots started again (new instance ids) at ``--restart-at``.
- ``router-kill``: SIGKILL of one of two routers at ``--kill-at``, restarted at
  ``--restart-at``.
- ``registry-kill``: SIGKILL of one of two registries at ``--kill-at``, of the other
  half-way to ``--restart-at`` (no registry at all), both started again at ``--restart-at``.
- ``broker-restart``: ``rabbitmqctl stop_app``, ``--outage-s`` (10 s), ``start_app``. This
  stops the machine's broker for everyone: refused without ``--allow-broker-restart``.
- ``redis-restart``: the mesh runs on a throw-away ``redis-server`` of its own (never the
  shared one), SIGKILLed at ``--kill-at`` and started again, empty, ``--redis-down-s``
  later (``--redis-aof``: appendonly with fsync always, so the restart keeps the data).

The handler (bench/fault_agents.py) applies one side effect per task through
``ctx.apply_once`` and records every handler start and every applied effect in a ledger on
a separate Redis (the shared one, keys ``<namespace>:ledger:*``), which no fault touches.

Per run: submitted, accepted, lost, doubled Results, side effects applied twice or never,
Result statuses and failures by error code, a per-second timeline, recovery times (see
DEFINITIONS, printed with the results). With ``-r N`` the median and range of every figure.
JSON in ``bench/results/faults-<scenario>[-short][-aof][-quick].json``; a progress line every
``--progress-s`` on stderr; the children's stderr in ``/tmp/bench-faults-<namespace>/``.

Usage::

    bash infra/bench.sh faults kill30 -r 3                # the seeds' run (~3 min a run)
    .venv/bin/python bench/faults.py kill30 --lease short --rate 200
    .venv/bin/python bench/faults.py redis-restart [--redis-aof]
    .venv/bin/python bench/faults.py kill30 --quick       # a smoke run (< 1 min)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as redis_asyncio
from aio_pika.abc import AbstractIncomingMessage
from redis.exceptions import RedisError

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import procstat  # noqa: E402
from bench.fault_agents import agent_id, ledger_keys, topic  # noqa: E402
from mesh.client import MeshClient  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.connection import MeshConnection, connect  # noqa: E402
from mesh.dispatch.store import TaskStore  # noqa: E402
from mesh.errors import ServiceUnavailable  # noqa: E402
from mesh.management import Management  # noqa: E402
from mesh.registry.state import load_state  # noqa: E402
from mesh.schemas import Result, TaskEnvelope, new_id, now_ms  # noqa: E402
from mesh.schemas.result import TERMINAL_STATUSES  # noqa: E402

MESH = str(ROOT / ".venv" / "bin" / "mesh")
SCENARIOS = ("kill30", "broker-restart", "redis-restart", "router-kill", "registry-kill")
#: offered tasks/s of each scenario unless --rate says otherwise
DEFAULT_RATE = {
    "kill30": 100.0,
    "broker-restart": 30.0,
    "redis-restart": 25.0,
    "router-kill": 100.0,
    "registry-kill": 100.0,
}
LEASES = {"default": None, "short": (1.0, 3.0)}  # (heartbeat_s, lease_ttl_s)
STOP_GRACE_S = 10.0
SUCCESS_TARGET = 0.99

DEFINITIONS = {
    "submitted": "tasks scheduled by the open loop (one every 1/rate s)",
    "accepted": "tasks whose publish to the ingress exchange the broker confirmed",
    "lost": "accepted tasks with no terminal Result by their deadline + --grace-s "
    "(a failed Result is not lost: see statuses and failures_by_code)",
    "doubled_results": "tasks answered by two or more terminal Results (identical copies "
    "included; conflicting_results: copies that differ in status, output or error)",
    "effect_twice": "tasks whose side effect was applied two or more times (ledger)",
    "completed_effect_never": "tasks with a completed Result whose side effect was never "
    "applied (ledger)",
    "effect_not_completed": "tasks with no completed Result whose side effect was applied",
    "success_rate": "share of submitted tasks whose first terminal Result is completed",
    "on_time_rate": "share of submitted tasks completed within --slo-s (5 s) of their "
    "scheduled arrival: a success in the timeline and for recovery_s",
    "recovery_s": "per fault (a kill or a stop, not a restart): from the fault to the "
    "start of the first 5-s window of arrivals (1-s steps, the first one starting 1 s "
    "before the fault) after which every window until the next fault or the end of the "
    f"load (a restart is part of the recovery) has >= {SUCCESS_TARGET:.0%} of its "
    "submitted tasks completed on time (--slo-s); 0: never below; null: not back before "
    "the next fault or the end",
    "dead_work_s": "kill30: from the SIGKILL to the moment the dead instances stopped "
    "holding work, over the agents that kept a live instance: the last first re-run start, "
    "on a live instance, of a task a killed instance had started and not answered (its "
    "claim stays with the dead holder until the lease lapses; a killed process gets no new "
    "delivery: the broker requeues its unacked messages when its connection drops); 0 when "
    "no killed instance held a task",
    "dead_work_orphaned_s": "kill30: dead_work_s for the tasks of agents the kill left "
    "with no instance at all (bounded by the restart, not by the lease)",
    "stranded_tasks": "kill30: tasks a killed instance had started and never answered",
    "stranded_result_s": "kill30: from the SIGKILL to the first terminal Result of the last "
    "stranded task",
    "lease_down_s": "kill30: from the SIGKILL to the registry's agent.down of each killed "
    "instance (median and max; until then routers count it as capacity)",
    "restart_up_s": "from a restart to the agent.up of the last restarted instance",
    "spurious_downs": "agent.down events of instances that were not killed",
    "latency_ms": "from the scheduled arrival to the first terminal Result (completed only)",
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Plan:
    """What one run does: its processes, its load and its faults (offsets in seconds)."""

    scenario: str
    rate: float
    duration_s: float
    agents: int
    instances: int
    routers: int
    registries: int
    events: tuple[tuple[float, str], ...]


def make_plan(args: argparse.Namespace) -> Plan:
    kill_at, restart_at = args.kill_at, args.restart_at
    sc = args.scenario
    events: tuple[tuple[float, str], ...]
    if sc == "kill30":
        events = ((kill_at, "kill-instances"), (restart_at, "restart-instances"))
    elif sc == "router-kill":
        events = ((kill_at, "kill-router"), (restart_at, "restart-router"))
    elif sc == "registry-kill":
        mid = round((kill_at + restart_at) / 2, 3)
        events = (
            (kill_at, "kill-registry"),
            (mid, "kill-last-registry"),
            (restart_at, "restart-registries"),
        )
    elif sc == "broker-restart":
        events = ((kill_at, "broker-stop"), (kill_at + args.outage_s, "broker-start"))
    else:
        events = ((kill_at, "redis-restart"),)
    return Plan(
        scenario=sc,
        rate=args.rate,
        duration_s=args.duration,
        agents=args.agents,
        instances=args.instances,
        routers=args.routers or (2 if sc == "router-kill" else 1),
        registries=args.registries or (2 if sc == "registry-kill" else 1),
        events=events,
    )


# --- processes -------------------------------------------------------------------------------
@dataclass(slots=True)
class Slot:
    """One worker instance slot: agent k, instance j, restarted `gen` times."""

    k: int
    j: int
    gen: int = 0

    @property
    def name(self) -> str:
        return f"w{self.k:02d}i{self.j}"

    @property
    def instance_id(self) -> str:
        return f"{agent_id(self.k)}-i{self.j}-g{self.gen}"


class Fleet:
    """The run's processes; SIGKILLed ones are remembered, unexpected exits reported."""

    def __init__(self, log_dir: Path, env: dict[str, str]) -> None:
        self.log_dir = log_dir
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.killed: set[int] = set()  # pids this bench killed on purpose
        self.exits: list[dict[str, Any]] = []
        log_dir.mkdir(parents=True, exist_ok=True)

    def spawn(self, name: str, cmd: list[str], extra: dict[str, str] | None = None) -> None:
        with (self.log_dir / f"{name}.err").open("ab") as err:
            self.procs[name] = subprocess.Popen(
                cmd,
                cwd=ROOT,
                env={**os.environ, **self.env, **(extra or {})},
                stdout=subprocess.DEVNULL,
                stderr=err,
            )

    def spawn_worker(self, slot: Slot) -> None:
        cmd = [MESH, "worker", f"bench.fault_agents:a{slot.k:02d}", "--app-dir", str(ROOT)]
        self.spawn(slot.name, [*cmd, "--instance-id", slot.instance_id])

    def sigkill(self, name: str) -> None:
        proc = self.procs[name]
        self.killed.add(proc.pid)
        proc.kill()
        proc.wait()

    def check(self) -> None:
        """Record children that exited without being killed by the bench (once each)."""
        for name, p in list(self.procs.items()):
            if p.poll() is not None and p.pid not in self.killed:
                self.killed.add(p.pid)
                tail = ""
                with contextlib.suppress(OSError):
                    tail = (self.log_dir / f"{name}.err").read_text(errors="replace")[-600:]
                self.exits.append({"name": name, "rc": p.returncode, "stderr_tail": tail})
                log(f"  !! {name} exited by itself (rc {p.returncode}); see {self.log_dir}")

    def stop(self) -> None:
        procstat.stop_all(self.procs.values(), STOP_GRACE_S)
        self.procs.clear()


def free_port(preferred: int) -> int:
    for port in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError("no free port")


class PrivateRedis:
    """A throw-away redis-server for the mesh of one run (never the shared one)."""

    def __init__(self, folder: Path, port: int, aof: bool) -> None:
        self.folder, self.port, self.aof = folder, port, aof
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        cmd = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""]
        cmd += ["--dir", str(self.folder), "--daemonize", "no"]
        cmd += ["--appendonly", "yes", "--appendfsync", "always"] if self.aof else []
        cmd += [] if self.aof else ["--appendonly", "no"]
        self.starts += 1
        with (self.folder / "redis.log").open("ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            time.sleep(0.02)
        raise RuntimeError(f"redis-server on port {self.port} did not start")

    def crash(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- the client side -------------------------------------------------------------------------
@dataclass(slots=True)
class Entry:
    scheduled: float
    agent: int
    deadline: float
    accepted: bool | None = None
    publish_error: str | None = None
    #: every Result received: (time, status, error code, instance_id, gist)
    results: list[tuple[float, str, str | None, str | None, str]] = field(default_factory=list)

    def first(self) -> tuple[float, str, str | None, str | None, str] | None:
        for r in self.results:
            if r[1] in TERMINAL_STATUSES:
                return r
        return None


class FaultClient(MeshClient):
    """A MeshClient that keeps every Result of the tracked tasks, duplicates included."""

    def __init__(self, conn: MeshConnection) -> None:
        super().__init__(conn, on_result=self._arrived)
        self.entries: dict[str, Entry] = {}

    def _arrived(self, result: Result) -> None:
        entry = self.entries.get(result.task_id)
        if entry is not None:
            code = result.error.code if result.error else None
            gist = orjson.dumps([result.status, result.output, code]).decode()
            entry.results.append((time.time(), result.status, code, result.instance_id, gist))


class EventTap:
    """Records ``agent.up`` / ``agent.down`` events: (time, type, instance_id, reason)."""

    def __init__(self, conn: MeshConnection) -> None:
        self.conn = conn
        self.seen: list[tuple[float, str, str, str]] = []

    async def start(self) -> None:
        channel = await self.conn.channel(confirms=False, prefetch=1_000)
        queue = await channel.declare_queue(
            f"{self.conn.settings.namespace}.faulttap.{new_id()[:8]}",
            exclusive=True,
            auto_delete=True,
        )
        for key in ("agent.up", "agent.down"):
            await queue.bind(self.conn.topology.events, routing_key=key)
        await queue.consume(self._on_event, no_ack=True)

    async def _on_event(self, message: AbstractIncomingMessage) -> None:
        try:
            event = orjson.loads(message.body)
        except orjson.JSONDecodeError:
            return
        reason = str((event.get("data") or {}).get("reason") or "")
        self.seen.append(
            (time.time(), str(event.get("type")), str(event.get("instance_id")), reason)
        )


# --- one run ---------------------------------------------------------------------------------
@dataclass(slots=True)
class Run:
    """The live state of one run."""

    plan: Plan
    args: argparse.Namespace
    fleet: Fleet
    client: FaultClient
    slots: list[Slot]
    redis: PrivateRedis | None
    t0: float = 0.0
    faults: list[dict[str, Any]] = field(default_factory=list)
    killed_slots: list[Slot] = field(default_factory=list)
    killed_ids: dict[str, float] = field(default_factory=dict)  # instance_id -> kill time
    orphaned: list[str] = field(default_factory=list)  # agents left with no instance
    restarted_ids: dict[str, float] = field(default_factory=dict)  # instance_id -> start
    rng: random.Random = field(default_factory=random.Random)

    def mark(self, action: str, **detail: Any) -> float:
        now = time.time()
        self.faults.append({"action": action, "t_s": round(now - self.t0, 3), **detail})
        log(f"  >> t={now - self.t0:5.1f}s {action} {detail if detail else ''}")
        return now


async def act(run: Run, action: str) -> None:
    """Inject one fault (or undo it)."""
    fleet, args = run.fleet, run.args
    if action == "kill-instances":
        count = max(1, round(args.kill_share * len(run.slots)))
        run.killed_slots = sorted(
            pick(run.slots, count, args.kill_pick, run.rng), key=lambda s: (s.k, s.j)
        )
        started = time.time()
        for slot in run.killed_slots:
            fleet.sigkill(slot.name)
            run.killed_ids[slot.instance_id] = started
        orphaned = {s.k for s in run.killed_slots} - {
            s.k for s in run.slots if s not in run.killed_slots
        }
        run.orphaned = sorted(agent_id(k) for k in orphaned)
        run.mark(
            "kill-instances",
            killed=[s.instance_id for s in run.killed_slots],
            agents_without_instance=sorted(agent_id(k) for k in orphaned),
        )
    elif action == "restart-instances":
        at = run.mark("restart-instances")
        for slot in run.killed_slots:
            slot.gen += 1
            fleet.spawn_worker(slot)
            run.restarted_ids[slot.instance_id] = at
    elif action == "kill-router":
        run.mark("kill-router", name="router1")
        fleet.sigkill("router1")
    elif action == "restart-router":
        run.mark("restart-router", name="router1")
        fleet.spawn("router1", [MESH, "router"], router_env())
    elif action in ("kill-registry", "kill-last-registry"):
        name = "registry1" if action == "kill-registry" else "registry0"
        run.mark(action, name=name)
        fleet.sigkill(name)
    elif action == "restart-registries":
        run.mark("restart-registries")
        for i in range(run.plan.registries):
            name = f"registry{i}"
            if fleet.procs[name].poll() is not None:
                fleet.spawn(name, [MESH, "registry"])
    elif action == "broker-stop":
        log("  !! WARNING: stopping the machine's RabbitMQ (rabbitmqctl stop_app): every user")
        log(f"  !! of this broker loses it for {args.outage_s:.0f} s")
        run.mark("broker-stop")
        done = await asyncio.to_thread(rabbitmqctl, "stop_app")
        run.mark("broker-stopped", rc=done)
    elif action == "broker-start":
        run.mark("broker-start")
        done = await asyncio.to_thread(rabbitmqctl, "start_app")
        run.mark("broker-started", rc=done)
    elif action == "redis-restart":
        assert run.redis is not None
        run.mark("redis-kill", aof=run.redis.aof)
        run.redis.crash()
        await asyncio.sleep(args.redis_down_s)
        await asyncio.to_thread(run.redis.start)
        run.mark("redis-started")
    else:  # pragma: no cover - make_plan only schedules the actions above
        raise ValueError(action)


def pick(slots: list[Slot], count: int, how: str, rng: random.Random) -> list[Slot]:
    """`count` slots: any (random), or spread over the agents, every agent keeping one
    instance as long as possible (spread)."""
    if how == "random":
        return rng.sample(slots, count)
    by_j: dict[int, list[Slot]] = {}
    for slot in slots:
        by_j.setdefault(slot.j, []).append(slot)
    ordered = [s for j in sorted(by_j) for s in rng.sample(by_j[j], len(by_j[j]))]
    return ordered[:count]


def rabbitmqctl(command: str) -> int:
    return subprocess.run(["rabbitmqctl", command], capture_output=True, timeout=120).returncode


def router_env() -> dict[str, str]:
    """Semantic mode: a query below the threshold still reaches an agent (load stays on)."""
    return {"MESH_FALLBACK_AGENT": agent_id(0)}


def make_envelope(args: argparse.Namespace, k: int, n: int, reply_to: str) -> TaskEnvelope:
    payload = {"ms": args.handler_ms}
    timeout_ms = int(args.task_timeout_s * 1000)
    if args.mode == "semantic":
        text = f"I have a question about {topic(k)} #{n}"
        return TaskEnvelope(
            capability=text, payload=payload, timeout_ms=timeout_ms, reply_to=reply_to
        )
    return TaskEnvelope(
        capability="fault drill",
        target=agent_id(k),
        payload=payload,
        timeout_ms=timeout_ms,
        reply_to=reply_to,
    )


async def send(client: FaultClient, envelope: TaskEnvelope, entry: Entry) -> None:
    try:
        await client.submit(envelope)
        entry.accepted = True
    except Exception as exc:  # a refused publish is a not-accepted task, not a crashed bench
        entry.accepted, entry.publish_error = False, type(exc).__name__


async def drive(run: Run) -> None:
    """The open loop with the faults on their timetable and a progress line."""
    plan, args, client = run.plan, run.args, run.client
    n = max(1, round(plan.rate * plan.duration_s))
    sends: set[asyncio.Task[None]] = set()
    run.t0 = time.time() + 0.2
    timeout = args.task_timeout_s

    async def at(offset: float, action: str) -> None:
        await asyncio.sleep(max(0.0, run.t0 + offset - time.time()))
        await act(run, action)

    async def faults() -> None:
        for offset, action in plan.events:  # in order: an action may take seconds
            await at(offset, action)

    fault_task = asyncio.create_task(faults())
    progress = asyncio.create_task(report_progress(run))
    try:
        for i in range(n):
            scheduled = run.t0 + i / plan.rate
            delay = scheduled - time.time()
            if delay > 0:
                await asyncio.sleep(delay)
            k = i % plan.agents
            envelope = make_envelope(args, k, i, client.reply_to)
            entry = Entry(scheduled, k, scheduled + timeout)
            client.entries[envelope.task_id] = entry
            task = asyncio.create_task(send(client, envelope, entry))
            sends.add(task)
            task.add_done_callback(sends.discard)
        await fault_task
        await wait_resolved(client.entries, args.grace_s)
        await asyncio.gather(*sends, return_exceptions=True)
        await wait_resolved(client.entries, args.grace_s)
        await asyncio.sleep(args.settle_s)  # late duplicates
    finally:
        progress.cancel()
        fault_task.cancel()
        await asyncio.gather(progress, fault_task, return_exceptions=True)


async def wait_resolved(entries: dict[str, Entry], grace_s: float) -> None:
    """Until every accepted entry has a terminal Result or is past deadline + grace."""
    while True:
        now = time.time()
        open_ = [
            e
            for e in entries.values()
            if e.accepted is not False and e.first() is None and now < e.deadline + grace_s
        ]
        if not open_:
            return
        await asyncio.sleep(0.1)


async def report_progress(run: Run) -> None:
    last_ok = 0
    last_t = time.time()
    while True:
        await asyncio.sleep(run.args.progress_s)
        run.fleet.check()
        now = time.time()
        entries = list(run.client.entries.values())
        firsts = [e.first() for e in entries]
        ok = sum(1 for f in firsts if f is not None and f[1] == "completed")
        bad = sum(1 for f in firsts if f is not None and f[1] != "completed")
        waiting = sum(1 for e, f in zip(entries, firsts, strict=True) if f is None)
        rate = (ok - last_ok) / max(1e-6, now - last_t)
        last_ok, last_t = ok, now
        log(
            f"  t={now - run.t0:5.1f}s submitted {len(entries)} completed {ok} "
            f"not-completed {bad} waiting {waiting} | {rate:.0f} completed/s"
        )


# --- bringing a run up -----------------------------------------------------------------------
async def wait_for(
    predicate: Callable[[], Any], timeout: float, what: str, fleet: Fleet | None = None
) -> None:
    end = time.monotonic() + timeout
    while True:
        if fleet is not None:
            fleet.check()
            if fleet.exits:
                raise RuntimeError(f"a child exited while waiting for {what}: {fleet.exits}")
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.monotonic() > end:
            raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
        await asyncio.sleep(0.25)


async def live_instances(conn: MeshConnection) -> int:
    state = await load_state(conn.redis, conn.keys)
    now = now_ms()
    return sum(len(a.live_instances(now)) for a in state.values())


async def consumers(conn: MeshConnection, queue: str) -> int:
    channel = await conn.channel(confirms=False)
    try:
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.consumer_count or 0)
    except Exception:
        return 0
    finally:
        if not channel.is_closed:
            await channel.close()


async def probe(client: FaultClient, agents: int) -> bool:
    """One targeted task per agent completes."""
    envelopes = [
        TaskEnvelope(capability="probe", target=agent_id(k), timeout_ms=10_000)
        for k in range(agents)
    ]
    done = await asyncio.gather(
        *(client.send(e, wait_s=12) for e in envelopes), return_exceptions=True
    )
    return all(isinstance(r, Result) and r.status == "completed" for r in done)


async def bring_up(run: Run, conn: MeshConnection) -> None:
    plan, fleet = run.plan, run.fleet
    for i in range(plan.registries):
        fleet.spawn(f"registry{i}", [MESH, "registry"])
    await wait_for(
        lambda: _at_least(consumers(conn, conn.topology.registry), plan.registries),
        120,
        "registries",
        fleet,
    )
    for i in range(plan.routers):
        fleet.spawn(f"router{i}", [MESH, "router"], router_env())
    for slot in run.slots:
        fleet.spawn_worker(slot)
    started = time.monotonic()
    total = len(run.slots)
    await wait_for(lambda: _at_least(live_instances(conn), total), 300, "instances", fleet)
    await wait_for(
        lambda: _at_least(consumers(conn, conn.topology.router_queue), plan.routers),
        300,
        "routers",
        fleet,
    )
    log(f"  {total} instances and {plan.routers} router(s) up in {time.monotonic() - started:.0f}s")
    await wait_for(lambda: probe(run.client, plan.agents), 120, "probe", fleet)


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count >= n)


async def read_ledger(ledger: redis_asyncio.Redis, namespace: str) -> dict[str, list[Any]]:
    starts_key, applied_key = ledger_keys(namespace)
    out: dict[str, list[Any]] = {}
    for name, key in (("starts", starts_key), ("applied", applied_key)):
        rows = await ledger.lrange(key, 0, -1)
        parsed = []
        for row in rows:
            text = row.decode() if isinstance(row, bytes) else str(row)
            task_id, instance_id, ms = text.split(" ")
            parsed.append((task_id, instance_id, int(ms) / 1000.0))
        out[name] = parsed
    return out


async def cleanup(settings: Settings, ledger: redis_asyncio.Redis) -> None:
    ns = settings.namespace
    try:
        await asyncio.to_thread(Management(settings).purge_namespace, ns)
    except Exception as exc:
        log(f"purging {ns} failed: {exc!r}")
    try:
        keys = [k async for k in ledger.scan_iter(match=f"{ns}:*", count=1000)]
        for i in range(0, len(keys), 1000):
            await ledger.delete(*keys[i : i + 1000])
    except Exception as exc:  # cleaning up must not hide what went wrong before
        log(f"deleting the Redis keys of {ns} failed: {exc!r}")


def child_env(
    args: argparse.Namespace, namespace: str, redis_url: str | None, ledger: str
) -> dict[str, str]:
    env = {
        "MESH_NAMESPACE": namespace,
        "FAULT_LEDGER_URL": ledger,
        "FAULT_AGENTS": str(args.agents),
        "FAULT_CONCURRENCY": str(args.concurrency),
    }
    if redis_url is not None:
        env["MESH_REDIS_URL"] = redis_url
    lease = LEASES[args.lease]
    if lease is not None:
        env["MESH_HEARTBEAT_S"], env["MESH_LEASE_TTL_S"] = (str(v) for v in lease)
    return env


async def run_once(plan: Plan, args: argparse.Namespace, rep: int) -> dict[str, Any]:
    base = Settings.from_env()
    ledger_url = base.redis_url.get_secret_value()  # the shared Redis: no fault touches it
    namespace = f"faults-{plan.scenario.split('-')[0]}-{new_id()[:8]}"
    log_dir = Path(f"/tmp/bench-faults-{namespace}")
    private: PrivateRedis | None = None
    tmp: str | None = None
    if plan.scenario == "redis-restart":
        tmp = tempfile.mkdtemp(prefix=f"bench-faults-redis-{namespace}-")
        private = PrivateRedis(Path(tmp), free_port(args.redis_port), args.redis_aof)
        private.start()
    overrides: dict[str, Any] = {"namespace": namespace}
    if private is not None:
        overrides["redis_url"] = private.url
    lease = LEASES[args.lease]
    if lease is not None:
        overrides["heartbeat_s"], overrides["lease_ttl_s"] = lease
    settings = Settings.from_env(**overrides)
    env = child_env(args, namespace, private.url if private else None, ledger_url)
    fleet = Fleet(log_dir, env)
    ledger = redis_asyncio.Redis.from_url(ledger_url)
    log(
        f"[{plan.scenario} run {rep}] namespace {namespace}, lease {args.lease}, "
        f"{plan.agents}x{plan.instances} instances, {plan.routers} router(s), "
        f"{plan.registries} registr{'y' if plan.registries == 1 else 'ies'}, "
        f"{plan.rate:.0f} tasks/s for {plan.duration_s:.0f}s; logs in {log_dir}"
    )
    slots = [Slot(k, j) for k in range(plan.agents) for j in range(plan.instances)]
    try:
        async with await connect(settings, name="bench-faults") as conn:
            client = FaultClient(conn)
            async with client:
                run = Run(plan, args, fleet, client, slots, private)
                run.rng.seed(args.seed + rep)
                await bring_up(run, conn)
                tap = EventTap(conn)
                await tap.start()
                await drive(run)
                fleet.check()
                book = await read_ledger(ledger, namespace)
                doc = analyse(run, tap.seen, book)
                doc["examples"]["detail"] = await explain_tasks(run, conn, book, doc["examples"])
                return doc
    finally:
        fleet.stop()
        await cleanup(settings, ledger)
        await ledger.aclose()
        if private is not None:
            private.stop()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


async def explain_tasks(
    run: Run, conn: MeshConnection, book: dict[str, list[Any]], examples: dict[str, list[str]]
) -> dict[str, Any]:
    """What the bench and the mesh know of the example tasks: when each was scheduled, its
    Results, the handler starts and effects of the ledger, the mesh's task state and history
    (read before the namespace is purged)."""
    store = TaskStore(conn.redis, conn.keys, conn.settings)
    wanted = sorted({t for ids in examples.values() for t in ids})
    detail: dict[str, Any] = {}
    for task_id in wanted[:20]:
        entry = run.client.entries[task_id]
        info: dict[str, Any] = {
            "agent": agent_id(entry.agent),
            "scheduled_t_s": round(entry.scheduled - run.t0, 3),
            "accepted": entry.accepted,
            "results": [
                {"t_s": round(r[0] - run.t0, 3), "status": r[1], "code": r[2], "instance": r[3]}
                for r in entry.results
            ],
            "starts": [
                [i, round(t - run.t0, 3)] for task, i, t in book["starts"] if task == task_id
            ],
            "applied": [
                [i, round(t - run.t0, 3)] for task, i, t in book["applied"] if task == task_id
            ],
        }
        try:
            with contextlib.suppress(RedisError, OSError):  # a pooled connection that
                await conn.redis.ping()  # died with a restarted Redis fails once
            info["mesh_state"] = await store.state(task_id)
            info["mesh_history"] = [
                {k: v for k, v in row.items() if k != "result"}
                for row in await store.history(task_id)
            ]
        except Exception as exc:  # the mesh's Redis may be the one that failed
            info["mesh_state"] = f"unreadable: {exc!r}"
        detail[task_id] = info
    return detail


# --- analysis --------------------------------------------------------------------------------
def pct(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))
    return round(ordered[index], 1)


def timeline(
    run: Run, entries: Iterable[Entry], seconds: int, slo_s: float
) -> list[dict[str, Any]]:
    """Per second of arrival: submitted, completed (ever), on time, not completed, lost,
    ok and on-time rates and latency p50/p99; ``done``: completed Results by arrival time."""
    rows: list[dict[str, Any]] = [
        {"t": s, "submitted": 0, "completed": 0, "on_time": 0, "not_completed": 0, "lost": 0}
        | {"done": 0}
        for s in range(seconds)
    ]
    lat: list[list[float]] = [[] for _ in range(seconds)]
    for e in entries:
        b = int(e.scheduled - run.t0)
        if not 0 <= b < seconds:
            continue
        rows[b]["submitted"] += 1
        first = e.first()
        if first is None:
            rows[b]["lost" if e.accepted else "not_completed"] += 1
            continue
        if first[1] == "completed":
            rows[b]["completed"] += 1
            rows[b]["on_time"] += int(first[0] - e.scheduled <= slo_s)
            lat[b].append((first[0] - e.scheduled) * 1000)
            d = int(first[0] - run.t0)
            if 0 <= d < seconds:
                rows[d]["done"] += 1
        else:
            rows[b]["not_completed"] += 1
    for row, values in zip(rows, lat, strict=True):
        n = row["submitted"]
        row["ok_rate"] = round(row["completed"] / n, 4) if n else None
        row["on_time_rate"] = round(row["on_time"] / n, 4) if n else None
        row["p50_ms"], row["p99_ms"] = pct(values, 50), pct(values, 99)
    return rows


def recovery(rows: list[dict[str, Any]], fault_t: float, end_t: float, window: int) -> float | None:
    """`recovery_s` of DEFINITIONS for a fault at `fault_t` and a phase ending at `end_t`."""
    first_start = max(0, math.floor(fault_t) - 1)
    last_start = max(first_start, int(end_t) - window)
    bad_last: int | None = None
    for s in range(first_start, last_start + 1):
        chunk = rows[s : s + window]
        n = sum(r["submitted"] for r in chunk)
        ok = sum(r["on_time"] for r in chunk)
        if n and ok / n < SUCCESS_TARGET:
            bad_last = s
    if bad_last is None:
        return 0.0
    if bad_last >= last_start:
        return None
    return round(max(0.0, bad_last + 1 - fault_t), 1)


def analyse(
    run: Run, events: list[tuple[float, str, str, str]], book: dict[str, list[Any]]
) -> dict[str, Any]:
    plan = run.plan
    entries = run.client.entries
    ids = set(entries)
    firsts = {t: e.first() for t, e in entries.items()}
    accepted = [t for t, e in entries.items() if e.accepted]
    lost = [t for t in accepted if firsts[t] is None]
    statuses = Counter(f[1] for f in firsts.values() if f is not None)
    statuses.update({"lost": len(lost)})
    not_accepted = [t for t, e in entries.items() if not e.accepted and firsts[t] is None]
    if not_accepted:
        statuses.update({"not_accepted": len(not_accepted)})
    codes = Counter(
        f"{f[1]}:{f[2]}" for f in firsts.values() if f is not None and f[1] != "completed"
    )
    terminal = {t: [r for r in e.results if r[1] in TERMINAL_STATUSES] for t, e in entries.items()}
    doubled = [t for t, rs in terminal.items() if len(rs) >= 2]
    conflicting = [t for t in doubled if len({r[4] for r in terminal[t]}) > 1]
    applied = Counter(row[0] for row in book["applied"] if row[0] in ids)
    completed = {t for t, f in firsts.items() if f is not None and f[1] == "completed"}
    never = [t for t in completed if applied[t] == 0]
    twice = [t for t in ids if applied[t] >= 2]
    effect_not_completed = [t for t in ids - completed if applied[t] >= 1]
    seconds = math.ceil(plan.duration_s)
    rows = timeline(run, entries.values(), seconds, run.args.slo_s)
    lat = [(f[0] - entries[t].scheduled) * 1000 for t, f in firsts.items() if t in completed and f]

    fault_times = [f for f in run.faults if f["action"] in FAULT_ACTIONS]
    recoveries = []
    for i, f in enumerate(fault_times):
        end = fault_times[i + 1]["t_s"] if i + 1 < len(fault_times) else plan.duration_s
        recoveries.append(
            {"action": f["action"], "t_s": f["t_s"], "recovery_s": recovery(rows, f["t_s"], end, 5)}
        )

    metrics: dict[str, Any] = {
        "submitted": len(entries),
        "accepted": len(accepted),
        "lost": len(lost),
        "doubled_results": len(doubled),
        "conflicting_results": len(conflicting),
        "effect_twice": len(twice),
        "completed_effect_never": len(never),
        "effect_not_completed": len(effect_not_completed),
        "success_rate": round(len(completed) / len(entries), 4) if entries else 0.0,
        "on_time_rate": round(sum(r["on_time"] for r in rows) / len(entries), 4)
        if entries
        else 0.0,
        "latency_ms": {"p50": pct(lat, 50), "p99": pct(lat, 99), "max": pct(lat, 100)},
        "recovery_s": {r["action"]: r["recovery_s"] for r in recoveries},
    }
    downs = [ev for ev in events if ev[1] == "agent.down"]
    metrics["spurious_downs"] = sum(1 for ev in downs if ev[2] not in run.killed_ids)
    if run.killed_ids:
        metrics.update(kill_metrics(run, events, book, firsts))
    if run.restarted_ids:
        ups = {ev[2]: ev[0] for ev in events if ev[1] == "agent.up"}
        at = min(run.restarted_ids.values())
        seen = [ups[i] - at for i in run.restarted_ids if i in ups]
        metrics["restart_up_s"] = (
            round(max(seen), 2) if len(seen) == len(run.restarted_ids) else None
        )
    examples = {
        "lost": sorted(lost)[:5],
        "doubled": sorted(doubled)[:5],
        "effect_twice": sorted(twice)[:5],
        "completed_effect_never": sorted(never)[:5],
        "effect_not_completed": sorted(effect_not_completed)[:5],
    }
    return {
        "metrics": metrics,
        "statuses": dict(statuses),
        "failures_by_code": dict(codes),
        "recoveries": recoveries,
        "faults": run.faults,
        "agent_events": dict(Counter(f"{ev[1]}:{ev[3]}" if ev[3] else ev[1] for ev in events)),
        "spurious_down_instances": sorted({ev[2] for ev in downs if ev[2] not in run.killed_ids}),
        "unexpected_exits": run.fleet.exits,
        "examples": examples,
        "timeline": rows,
    }


#: the actions that break something (restarts repair: they end no recovery window)
FAULT_ACTIONS = {
    "kill-instances",
    "kill-router",
    "kill-registry",
    "kill-last-registry",
    "broker-stop",
    "redis-kill",
}


def kill_metrics(
    run: Run, events: list[tuple[float, str, str, str]], book: dict[str, list[Any]], firsts: Any
) -> dict[str, Any]:
    killed = run.killed_ids
    t_kill = min(killed.values())
    downs = {ev[2]: ev[0] for ev in events if ev[1] == "agent.down" and ev[2] in killed}
    down_s = [downs[i] - t_kill for i in killed if i in downs]
    starts: dict[str, list[tuple[str, float]]] = {}
    for task_id, instance_id, t in book["starts"]:
        if task_id in firsts:
            starts.setdefault(task_id, []).append((instance_id, t))
    orphaned = set(run.orphaned)
    stranded = []
    for task_id, rows in starts.items():
        if not any(i in killed for i, _ in rows):
            continue
        first = firsts[task_id]
        if first is not None and first[3] in killed:
            continue  # answered by the killed instance before it died
        stranded.append(task_id)
    reruns: dict[bool, list[float]] = {True: [], False: []}  # by "agent left with none"
    results = []
    for task_id in stranded:
        alone = agent_id(run.client.entries[task_id].agent) in orphaned
        later = [t for i, t in starts[task_id] if i not in killed and t >= t_kill]
        if later:
            reruns[alone].append(min(later) - t_kill)
        first = firsts[task_id]
        if first is not None:
            results.append(first[0] - t_kill)
    n_alone = sum(1 for t in stranded if agent_id(run.client.entries[t].agent) in orphaned)
    n_kept = len(stranded) - n_alone

    def worst(values: list[float], count: int) -> float | None:
        return round(max(values), 2) if values else (0.0 if not count else None)

    return {
        "killed_instances": len(killed),
        "lease_down_s": {
            "median": round(statistics.median(down_s), 2) if down_s else None,
            "max": round(max(down_s), 2) if down_s else None,
            "missing": len(killed) - len(down_s),
        },
        "agents_without_instance": len(orphaned),
        "stranded_tasks": len(stranded),
        "stranded_orphaned_tasks": n_alone,
        "stranded_not_rerun": len(stranded) - len(reruns[True]) - len(reruns[False]),
        "dead_work_s": worst(reruns[False], n_kept),
        "dead_work_orphaned_s": worst(reruns[True], n_alone),
        "stranded_result_s": round(max(results), 2) if results else None,
    }


# --- reporting -------------------------------------------------------------------------------
def flatten(doc: dict[str, Any], prefix: str = "") -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, f"{name}."))
        elif isinstance(value, bool):
            continue
        elif isinstance(value, int | float) or value is None:
            out[name] = value
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Median, min and max of every figure over the runs (None values are counted)."""
    table: dict[str, list[float | None]] = {}
    for run in runs:
        figures = {
            **flatten(run["metrics"]),
            **flatten(run["statuses"], "status."),
            **flatten(run["failures_by_code"], "failure."),
        }
        for key in figures:
            table.setdefault(key, [])
        for key in table:
            table[key].append(
                figures.get(key, 0 if key.startswith(("status.", "failure.")) else None)
            )
    out: dict[str, dict[str, Any]] = {}
    for key, values in table.items():
        known = [float(v) for v in values if v is not None]
        out[key] = {
            "median": round(statistics.median(known), 3) if known else None,
            "min": min(known) if known else None,
            "max": max(known) if known else None,
            "none": len(values) - len(known),
            "runs": values,
        }
    return out


def fmt(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"


def summary_lines(summary: dict[str, dict[str, Any]], runs: int) -> list[str]:
    lines = [f"{'figure':34s} {'median':>9s} {'range':>17s}" + (" none" if runs > 1 else "")]
    for key, s in summary.items():
        spread = f"[{fmt(s['min'])}-{fmt(s['max'])}]" if runs > 1 else ""
        none = f" {s['none']}" if runs > 1 and s["none"] else ""
        lines.append(f"{key:34s} {fmt(s['median']):>9s} {spread:>17s}{none}")
    return lines


def run_lines(doc: dict[str, Any]) -> list[str]:
    m = doc["metrics"]
    lines = [
        f"  submitted {m['submitted']} accepted {m['accepted']} lost {m['lost']} "
        f"doubled {m['doubled_results']} (conflicting {m['conflicting_results']}) "
        f"effect twice {m['effect_twice']} completed-effect-never {m['completed_effect_never']} "
        f"effect-not-completed {m['effect_not_completed']}",
        f"  success {m['success_rate'] * 100:.2f}% (on time {m['on_time_rate'] * 100:.2f}%) "
        f"latency p50 {fmt(m['latency_ms']['p50'])} "
        f"p99 {fmt(m['latency_ms']['p99'])} max {fmt(m['latency_ms']['max'])} ms; "
        f"statuses {doc['statuses']}; failures {doc['failures_by_code']}",
        "  recovery: "
        + ", ".join(
            f"{r['action']}@{r['t_s']:.0f}s -> {fmt(r['recovery_s'])} s" for r in doc["recoveries"]
        ),
    ]
    if "dead_work_s" in m:
        lines.append(
            f"  killed {m['killed_instances']}: lease down median "
            f"{fmt(m['lease_down_s']['median'])} "
            f"max {fmt(m['lease_down_s']['max'])} s (missing {m['lease_down_s']['missing']}); "
            f"stranded {m['stranded_tasks']} (not re-run {m['stranded_not_rerun']}); "
            f"dead_work_s {fmt(m['dead_work_s'])} (agents left with none: "
            f"{m['agents_without_instance']}, their {m['stranded_orphaned_tasks']} stranded "
            f"tasks re-run after {fmt(m['dead_work_orphaned_s'])} s); "
            f"stranded_result_s {fmt(m['stranded_result_s'])}"
        )
    if "restart_up_s" in m:
        lines.append(f"  restarted instances up after {fmt(m['restart_up_s'])} s")
    if m["spurious_downs"] or doc["unexpected_exits"]:
        lines.append(
            f"  spurious agent.down {m['spurious_downs']}; unexpected exits "
            f"{[x['name'] for x in doc['unexpected_exits']]}"
        )
    ticks = [r for r in doc["timeline"] if r["submitted"]]
    per_s = " ".join(f"{(r['on_time_rate'] or 0) * 100:.0f}" for r in ticks)
    lines.append(f"  on-time % per second of arrival: {per_s}")
    return lines


def result_path(args: argparse.Namespace) -> Path:
    suffix = "-short" if args.lease == "short" else ""
    suffix += "-aof" if args.redis_aof else ""
    suffix += "-spread" if getattr(args, "kill_pick", "random") == "spread" else ""
    suffix += "-quick" if args.quick else ""
    return Path(args.results_dir) / f"faults-{args.scenario}{suffix}.json"


# --- entry point -----------------------------------------------------------------------------
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0],
        epilog="Definitions of the figures:\n"
        + "\n".join(f"  {k}: {v}" for k, v in DEFINITIONS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("scenario", choices=SCENARIOS, help="the fault to inject")
    p.add_argument("-r", "--repeat", type=int, default=1, help="runs (median and range)")
    p.add_argument(
        "--lease",
        choices=sorted(LEASES),
        default="default",
        help="default: the mesh's (heartbeat 5 s, lease 15 s); short: 1 s / 3 s",
    )
    p.add_argument(
        "--rate",
        type=float,
        default=None,
        help="offered tasks/s, open loop (default per scenario: kill30 100, "
        "router-kill 100, registry-kill 100, broker-restart 30, redis-restart 25)",
    )
    p.add_argument("--duration", type=float, default=60.0, help="seconds of load (60)")
    p.add_argument("--kill-at", type=float, default=None, help="fault time (duration / 3)")
    p.add_argument("--restart-at", type=float, default=None, help="restart time (2 x duration / 3)")
    p.add_argument(
        "--kill-share",
        type=float,
        default=0.3,
        help="kill30: share of the worker instances SIGKILLed (0.3)",
    )
    p.add_argument(
        "--kill-pick",
        choices=("random", "spread"),
        default="random",
        help="kill30: any instances (random, the seeds' run: some agents may lose both) or "
        "spread (at most one per agent while possible)",
    )
    p.add_argument("--agents", type=int, default=20, help="agents (20)")
    p.add_argument("--instances", type=int, default=2, help="instances per agent (2)")
    p.add_argument("--routers", type=int, default=0, help="routers (router-kill 2, else 1)")
    p.add_argument("--registries", type=int, default=0, help="registries (registry-kill 2, else 1)")
    p.add_argument("--concurrency", type=int, default=16, help="max_concurrency per instance")
    p.add_argument(
        "--mode",
        choices=("target", "semantic"),
        default="target",
        help="targeted tasks (round robin over the agents) or routed by text",
    )
    p.add_argument(
        "--handler-ms",
        type=float,
        default=200.0,
        help="handler time; the side effect is applied half-way (200)",
    )
    p.add_argument("--task-timeout-s", type=float, default=30.0, help="task timeout (30)")
    p.add_argument(
        "--grace-s",
        type=float,
        default=10.0,
        help="wait past a task's deadline before counting it lost (10)",
    )
    p.add_argument(
        "--settle-s",
        type=float,
        default=3.0,
        help="wait after the last Result for late duplicates (3)",
    )
    p.add_argument(
        "--slo-s",
        type=float,
        default=5.0,
        help="a task completed within this long of its arrival is on time (5)",
    )
    p.add_argument("--outage-s", type=float, default=10.0, help="broker-restart: outage (10)")
    p.add_argument(
        "--allow-broker-restart",
        action="store_true",
        help="broker-restart stops the shared RabbitMQ: say you mean it",
    )
    p.add_argument(
        "--redis-aof",
        action="store_true",
        help="redis-restart: appendonly yes (fsync always): the restart keeps data",
    )
    p.add_argument("--redis-port", type=int, default=6391, help="the private redis-server port")
    p.add_argument("--redis-down-s", type=float, default=1.0, help="redis-restart: downtime (1)")
    p.add_argument("--seed", type=int, default=12, help="which instances kill30 picks")
    p.add_argument("--progress-s", type=float, default=5.0, help="progress line interval (5)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="a smoke run: 2x2 instances, 20 tasks/s for 9 s, short leases",
    )
    p.add_argument("--results-dir", default=str(ROOT / "bench" / "results"))
    args = p.parse_args(argv)
    if args.quick:
        args.agents, args.instances, args.duration = 2, 2, 9.0
        args.rate = args.rate or 20.0
        args.lease, args.task_timeout_s, args.grace_s, args.settle_s = "short", 10.0, 3.0, 1.0
        args.handler_ms, args.progress_s, args.redis_down_s = 20.0, 3.0, 0.5
    args.rate = args.rate or DEFAULT_RATE[args.scenario]
    args.kill_at = args.duration / 3 if args.kill_at is None else args.kill_at
    args.restart_at = 2 * args.duration / 3 if args.restart_at is None else args.restart_at
    if not 0 < args.kill_at < args.duration or not args.kill_at < args.restart_at:
        p.error("need 0 < --kill-at < --restart-at and --kill-at < --duration")
    if args.scenario == "broker-restart" and not args.allow_broker_restart:
        p.error(
            "broker-restart stops the machine's RabbitMQ for everyone using it: "
            "pass --allow-broker-restart (and watch it)"
        )
    if not 0 < args.kill_share <= 1:
        p.error("--kill-share must be in (0, 1]")
    if args.scenario == "registry-kill" and args.registries == 1:
        p.error("registry-kill needs at least 2 registries")
    if args.scenario == "router-kill" and args.routers == 1:
        p.error("router-kill needs at least 2 routers")
    if args.repeat < 1 or args.rate <= 0 or args.agents < 1 or args.instances < 1:
        p.error("--repeat, --rate and --agents must be positive")
    return args


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


async def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    plan = make_plan(args)
    runs = []
    for rep in range(1, args.repeat + 1):
        doc = await run_once(plan, args, rep)
        runs.append(doc)
        print(f"{plan.scenario} run {rep}/{args.repeat} (lease {args.lease}):", flush=True)
        print("\n".join(run_lines(doc)), flush=True)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)  # unwinds like Ctrl-C: children stopped
    started = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    log("definitions:\n" + "\n".join(f"  {k}: {v}" for k, v in DEFINITIONS.items()))
    try:
        runs = asyncio.run(run_all(args))
    except ServiceUnavailable as exc:
        log(f"bench/faults.py: {exc}")
        return 1
    summary = summarise(runs)
    print(f"\n{args.scenario} (lease {args.lease}): {len(runs)} run(s), median [min-max]")
    print("\n".join(summary_lines(summary, len(runs))), flush=True)
    doc = {
        "scenario": args.scenario,
        "started_utc": started,
        "host": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        "options": vars(args),
        "definitions": DEFINITIONS,
        "summary": summary,
        "runs": runs,
    }
    path = result_path(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, default=str))
    log(f"results: {path}")
    if not args.quick:
        summary_path = update_summary(path.parent / SUMMARY_FILE, path.stem, doc)
        log(f"summary: {summary_path}")
    return 0


#: the small file the README's table cites: each configuration's latest summary
SUMMARY_FILE = "faults-summary.json"


def update_summary(path: Path, key: str, doc: dict[str, Any]) -> Path:
    """Put `doc`'s summary (without runs and timelines) under `key` in `path`."""
    existing = json.loads(path.read_text()) if path.exists() else {}
    options = {k: doc["options"][k] for k in ("rate", "duration", "lease", "kill_pick", "repeat")}
    existing[key] = {
        "started_utc": doc["started_utc"],
        "options": options,
        "summary": doc["summary"],
    }
    path.write_text(json.dumps(dict(sorted(existing.items())), indent=1, default=str) + "\n")
    return path


if __name__ == "__main__":
    sys.exit(main())
