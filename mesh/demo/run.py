"""`run_demo`: the demo from start to summary.

1. the services: RabbitMQ and Redis answer, or ``infra/up.sh`` of the checkout starts them;
2. a clean namespace (a fresh ``demo-XXXXXXXX`` unless told otherwise; what an earlier run
   left in a named one is deleted),
   the shop's data seeded (the scenario's `seed`);
3. every member's `Member.prepare` (``npm ci`` for the Node.js agent; a member that cannot
   run is skipped, with one line saying why), then ``mesh registry``, ``mesh observer`` and
   every member as processes (``mesh worker SPEC --instance-id ID``, ``mesh bridge http``
   with its HTTP endpoint, ``node ...``); once each instance holds a lease, ``mesh router``
   (it indexes the registered agents before it consumes; the demo waits until every
   registration's texts are embedded, so its first decision knows them);
4. the scenario (`play`), its decisions printed as they happen (`EventTail`);
5. the summary (`mesh.demo.summary`), ``--json``, where to look next; the processes are
   stopped (on Ctrl-C too) and the namespace deleted (a run's own unless ``--keep``, a
   named one with ``--cleanup``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aio_pika.exceptions

from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.demo import summary as summaries
from mesh.demo.fleet import Fleet
from mesh.demo.script import DemoRun
from mesh.demo.tail import EventTail
from mesh.errors import ConfigError, MeshError
from mesh.observer.figures import Figures
from mesh.registry.state import load_state
from mesh.retrying import TRANSIENT_ERRORS
from mesh.schemas import now_ms
from mesh.schemas.codec import dumps
from mesh.tasks import raise_if_cancelling

#: how long the team may take to register, and the router to load its model
START_TIMEOUT_S = 120.0
#: the variable naming the AsyncAPI document a `Member.program` follows
ASYNCAPI_ENV = "MESH_ASYNCAPI"


@dataclass(frozen=True, slots=True)
class Member:
    """One agent of the team: a process per instance, started the way a user runs it.

    By default an instance is ``mesh worker SPEC --instance-id ID``. A member with `args`
    runs ``mesh ARGS --instance-id ID`` instead (``mesh bridge http ...``); one with
    `program` runs that program (an agent in another language, which names its own
    instances; it gets ``MESH_ASYNCAPI``, the namespace's AsyncAPI document). `backend` is a
    program started before the instances (the HTTP endpoint behind a bridge), `env`
    variables of the member's processes only. `prepare` readies the member before anything
    starts (``npm ci``) and says why it cannot run, in one line: the demo then runs
    without it (`DemoRun.skipped`).
    """

    agent_id: str
    spec: str = ""
    instances: int = 1
    args: tuple[str, ...] = ()
    program: tuple[str, ...] = ()
    backend: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    prepare: Callable[[Path], str | None] | None = None

    def instance_ids(self) -> list[str]:
        short = self.agent_id.removeprefix("cs.").replace("_", "-")
        return [f"{short}-{n + 1}" for n in range(self.instances)]

    def start(self, fleet: Fleet, contract: Path) -> None:
        """Start the member's backend, then each of its instances, in `fleet`."""
        short = self.agent_id.removeprefix("cs.").replace("_", "-")
        if self.backend:
            fleet.run(f"{short}-backend", self.backend, self.env)
        for instance_id in self.instance_ids():
            if self.program:
                fleet.run(instance_id, self.program, {**self.env, ASYNCAPI_ENV: str(contract)})
                continue
            args = self.args or ("worker", self.spec)
            fleet.start(instance_id, [*args, "--instance-id", instance_id], self.env)


class Scenario(Protocol):
    """What ``agents/demo_script.py`` provides."""

    TEAM: Sequence[Member]

    def environment(self, quick: bool) -> dict[str, str]: ...

    def seed(self, conn: MeshConnection) -> Awaitable[None]: ...

    def play(self, run: DemoRun) -> Awaitable[None]: ...


async def _reachable(settings: Settings) -> bool:
    try:
        async with await connect(settings, name="mesh-demo-probe"):
            return True
    except (MeshError, OSError):
        return False


def ensure_services(settings: Settings, root: Path) -> None:
    """RabbitMQ and Redis answer, or ``infra/up.sh`` of the checkout brings them up."""
    if asyncio.run(_reachable(settings)):
        return
    up = root / "infra" / "up.sh"
    print(f"demo: RabbitMQ or Redis does not answer; starting them ({up})", flush=True)
    subprocess.run(["bash", str(up)], check=True)
    if not asyncio.run(_reachable(settings)):
        raise ConfigError(
            "RabbitMQ or Redis still does not answer after infra/up.sh "
            "(check MESH_AMQP_URL and MESH_REDIS_URL)"
        )


async def clear_namespace(conn: MeshConnection) -> None:
    """Delete the namespace's queues, exchanges and Redis keys (an earlier run's)."""
    from mesh.management import Management

    await asyncio.to_thread(Management(conn.settings).purge_namespace, conn.settings.namespace)
    keys = [k async for k in conn.redis.scan_iter(match=conn.keys.pattern(), count=500)]
    for start in range(0, len(keys), 500):
        await conn.redis.delete(*keys[start : start + 500])


async def wait_for(
    what: str, fact: Callable[[], Awaitable[bool]], fleet: Fleet, timeout: float
) -> None:
    """Poll `fact` until it holds; fail at once when a process of the fleet died."""
    end = time.monotonic() + timeout
    while not await _holds(fact):
        # Ctrl-C cancels the demo; a cancel landing in a broker call can come out as a
        # closed channel (or not at all), and the demo then ran on to its end and exited 0
        raise_if_cancelling()
        died = fleet.died()
        if died:
            name, code = next(iter(died.items()))
            raise ConfigError(
                f"{name} exited with {code} while waiting for {what}:\n{fleet.log_tail(name)}"
            )
        if time.monotonic() > end:
            raise ConfigError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)  # a poll of other processes, bounded by the deadline
    raise_if_cancelling()  # the last poll held, and may have swallowed a Ctrl-C


async def _holds(fact: Callable[[], Awaitable[bool]]) -> bool:
    try:
        return await fact()
    except TRANSIENT_ERRORS:  # Redis busy or the broker away for a moment: ask again
        return False


def fleet_env(settings: Settings, root: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {**os.environ, **extra, "MESH_NAMESPACE": settings.namespace}
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(root) + (os.pathsep + path if path else "")
    return env


async def _all_live(conn: MeshConnection, team: Sequence[Member]) -> bool:
    state = await load_state(conn.redis, conn.keys)
    now = now_ms()
    for member in team:
        agent = state.get(member.agent_id)
        if agent is None or len(agent.live_instances(now)) < member.instances:
            return False
    return True


async def _consumers(conn: MeshConnection, queue: str) -> int:
    channel = await conn.channel()
    try:
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.consumer_count or 0)
    except aio_pika.exceptions.ChannelNotFoundEntity:  # not declared yet: no consumer
        return 0
    finally:
        if not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()


def prepare_team(team: Sequence[Member], root: Path) -> tuple[list[Member], dict[str, str]]:
    """The members that can run (each `Member.prepare` done) and why the others cannot."""
    ready: list[Member] = []
    skipped: dict[str, str] = {}
    for member in team:
        why = member.prepare(root) if member.prepare is not None else None
        if why is None:
            ready.append(member)
            continue
        skipped[member.agent_id] = why
        print(f"demo: skipping {member.agent_id}: {why}", flush=True)
    return ready, skipped


async def start_fleet(
    conn: MeshConnection, fleet: Fleet, team: Sequence[Member], contract: Path
) -> None:
    """Registry, observer and team; the router once every instance is live, ready once it
    has indexed every registration."""
    print("demo: starting mesh registry, mesh observer and the team...", flush=True)
    fleet.start("registry", ["registry"])
    fleet.start("observer", ["observer"])
    for member in team:
        member.start(fleet, contract)

    async def live() -> bool:
        return await _all_live(conn, team)

    await wait_for("every agent to register", live, fleet, START_TIMEOUT_S)
    print("demo: the team is registered; starting mesh router (loads its model)...", flush=True)
    fleet.start("router", ["router"])
    router_queue = conn.topology.router_queue

    async def routing() -> bool:
        return await _consumers(conn, router_queue) > 0

    await wait_for("the router to consume", routing, fleet, START_TIMEOUT_S)
    texts = await registered_texts(conn, [m.agent_id for m in team])

    async def indexed() -> bool:
        return await _embedded(conn, texts)

    await wait_for("the router to index every agent", indexed, fleet, START_TIMEOUT_S)


async def registered_texts(conn: MeshConnection, agent_ids: Sequence[str]) -> list[str]:
    """The texts a router embeds to index `agent_ids` (capability texts and examples), as
    the registry holds them: whatever language or bridge the agent runs in."""
    state = await load_state(conn.redis, conn.keys, prune=False)
    texts: set[str] = set()
    for agent_id in agent_ids:
        reg = state[agent_id].registration
        if reg is not None:
            texts.update((reg.capability_text, *reg.examples))
    return sorted(texts)


async def _embedded(conn: MeshConnection, texts: Sequence[str]) -> bool:
    """Has a router embedded every one of `texts` (its vector cache in Redis holds them)?"""
    from mesh.router.vectors import text_hash

    pattern = conn.keys.embedding("*", "*")  # whichever model the router loaded
    found = {
        k.rsplit(b":", 1)[-1].decode()
        async for k in conn.redis.scan_iter(match=pattern, count=1000)
    }
    return all(text_hash(t) in found for t in texts)


async def _settle_events(tail: EventTail, run: DemoRun, timeout: float = 5.0) -> None:
    """Wait (bounded) until the tail saw the routing decision and the outcome event of
    every answered request (they come from different processes, in either order)."""
    wanted = {o.task_id for o in run.outcomes if o.task_id and o.status is not None}
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        decided = {e.task_id for e in tail.of("route.decision")}
        ended = {e.task_id for e in tail.events if e.type.startswith("task.")}
        if wanted <= decided & ended:
            return
        await asyncio.sleep(0.1)  # events travel from other processes; bounded


async def write_contract(settings: Settings, folder: Path) -> Path:
    """The namespace's AsyncAPI document, for the team members in other languages."""
    from mesh.asyncapi import render

    path = folder / "asyncapi.json"
    await asyncio.to_thread(folder.mkdir, parents=True, exist_ok=True)
    await asyncio.to_thread(path.write_bytes, render(settings))
    return path


async def _demo(
    settings: Settings,
    team: Sequence[Member],
    skipped: dict[str, str],
    scenario: Scenario,
    fleet: Fleet,
    quick: bool,
    json_path: Path | None,
    cleanup: bool,
) -> int:
    started = time.monotonic()
    async with await connect(settings, name="mesh-demo") as conn:
        await clear_namespace(conn)
        await conn.topology.declare(await conn.channel())
        await scenario.seed(conn)
        figures = Figures(settings)
        tail = EventTail(conn, started, figures)
        await tail.start()
        try:
            await start_fleet(conn, fleet, team, await write_contract(settings, fleet.log_dir))
            print(f"demo: ready in {time.monotonic() - started:.1f} s\n", flush=True)
            async with MeshClient(conn) as client:
                run = DemoRun(conn, client, fleet, tail, quick, started, skipped=skipped)
                await scenario.play(run)
            await _settle_events(tail, run)
            dead = await summaries.dead_letters(conn)
            summary = summaries.build(run, figures.snapshot(), dead)
        finally:
            await tail.close()
            fleet.stop()
        print(summaries.render(summary), flush=True)
        if json_path is not None:
            await asyncio.to_thread(json_path.write_bytes, dumps(summary))
            print(f"summary written to {json_path}")
        raise_if_cancelling()  # interrupted: no summary code (the run exits 130)
        if cleanup:
            await clear_namespace(conn)
        else:
            _where_next(settings, summary)
        return 0 if summary["ok"] else 1


def _where_next(settings: Settings, summary: dict[str, Any]) -> None:
    ns = settings.namespace
    env = "" if ns == "mesh" else f"MESH_NAMESPACE={ns} "
    trace = summary["facts"].get("compound trace", "<trace id>")
    print(
        "\nWhere to look next (the namespace stays until `mesh demo --namespace NS --cleanup`):\n"
        f"  http://127.0.0.1:15672/#/queues        the {ns}.* queues (guest/guest): agent "
        "queues, dead letters\n"
        "  http://127.0.0.1:15672/#/connections   one connection per process, named "
        f"{ns}/<role>/...\n"
        f"  {env}mesh trace {trace}    the compound request, hop by hop\n"
        f"  {env}mesh dlq list                 the dead letters and their reasons\n"
        f"  {env}mesh task <task id>           one task's state history"
    )


def run_demo(
    settings: Settings,
    root: Path,
    scenario: Scenario,
    *,
    quick: bool,
    json_path: Path | None,
    cleanup: bool,
) -> int:
    """The whole demo; the exit code (0: every expectation met)."""
    ensure_services(settings, root)
    env = fleet_env(settings, root, scenario.environment(quick))
    log_dir = root / ".demo-logs" / settings.namespace
    fleet = Fleet(root, env, log_dir)
    print(f"demo: namespace {settings.namespace}; process logs in {log_dir}", flush=True)
    team, skipped = prepare_team(scenario.TEAM, root)
    code = 1
    try:
        code = asyncio.run(
            _demo(settings, team, skipped, scenario, fleet, quick, json_path, cleanup)
        )
        return code
    finally:
        fleet.stop()  # Ctrl-C, or a failure before the summary: no process outlives us
        if code == 0 and cleanup:
            # its namespace is gone and every expectation was met: nothing to read there
            # (a failed or kept run keeps them, one folder per namespace)
            shutil.rmtree(log_dir, ignore_errors=True)
            print(f"demo: process logs removed ({log_dir}; --keep keeps them)", flush=True)
        sys.stdout.flush()


__all__ = [
    "Member",
    "Scenario",
    "clear_namespace",
    "ensure_services",
    "prepare_team",
    "registered_texts",
    "run_demo",
]
