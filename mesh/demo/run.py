"""`run_demo`: the demo from start to summary.

1. the services: RabbitMQ and Redis answer, or ``infra/up.sh`` of the checkout starts them;
2. a clean namespace (``demo`` unless told otherwise; what an earlier run left is deleted),
   the shop's data seeded (the scenario's `seed`);
3. ``mesh registry``, ``mesh observer`` and every team member (``mesh worker SPEC
   --instance-id ID``) as processes; once each instance holds a lease, ``mesh router``
   (it indexes the registered agents before it consumes, so its first decision knows them);
4. the scenario (`play`), its decisions printed as they happen (`EventTail`);
5. the summary (`mesh.demo.summary`), ``--json``, where to look next; the processes are
   stopped (on Ctrl-C too) and, with ``--cleanup``, the namespace deleted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

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

#: how long the team may take to register, and the router to load its model
START_TIMEOUT_S = 120.0


@dataclass(frozen=True, slots=True)
class Member:
    """One agent of the team: a ``mesh worker`` process per instance."""

    agent_id: str
    spec: str
    instances: int = 1

    def instance_ids(self) -> list[str]:
        short = self.agent_id.removeprefix("cs.").replace("_", "-")
        return [f"{short}-{n + 1}" for n in range(self.instances)]


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
        died = fleet.died()
        if died:
            name, code = next(iter(died.items()))
            raise ConfigError(
                f"{name} exited with {code} while waiting for {what}:\n{fleet.log_tail(name)}"
            )
        if time.monotonic() > end:
            raise ConfigError(f"timed out after {timeout:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)  # a poll of other processes, bounded by the deadline


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
    except Exception:  # the queue is not declared yet: no consumer
        return 0
    finally:
        if not channel.is_closed:
            with contextlib.suppress(Exception):
                await channel.close()


async def start_fleet(conn: MeshConnection, fleet: Fleet, team: Sequence[Member]) -> None:
    """Registry, observer and team; the router once every instance is live."""
    print("demo: starting mesh registry, mesh observer and the team...", flush=True)
    fleet.start("registry", ["registry"])
    fleet.start("observer", ["observer"])
    for member in team:
        for instance_id in member.instance_ids():
            fleet.start(instance_id, ["worker", member.spec, "--instance-id", instance_id])

    async def live() -> bool:
        return await _all_live(conn, team)

    await wait_for("every agent to register", live, fleet, START_TIMEOUT_S)
    print("demo: the team is registered; starting mesh router (loads its model)...", flush=True)
    fleet.start("router", ["router"])
    router_queue = conn.topology.router_queue

    async def routing() -> bool:
        return await _consumers(conn, router_queue) > 0

    await wait_for("the router to consume", routing, fleet, START_TIMEOUT_S)
    texts = indexed_texts(team)

    async def indexed() -> bool:
        return await _embedded(conn, texts)

    await wait_for("the router to index every agent", indexed, fleet, START_TIMEOUT_S)


def indexed_texts(team: Sequence[Member]) -> list[str]:
    """The texts a router embeds to index the team (capability texts and examples)."""
    from mesh.cli._runner import load_agents

    agents = load_agents([m.spec for m in team])
    return sorted({t for a in agents for t in (a.capability_text, *a.examples)})


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
    """Wait (bounded) until the tail saw the outcome event of every answered request."""
    wanted = {o.task_id for o in run.outcomes if o.task_id and o.status is not None}
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        seen = {e.task_id for e in tail.events if e.type.startswith("task.")}
        if wanted <= seen:
            return
        await asyncio.sleep(0.1)  # events travel from other processes; bounded


async def _demo(
    settings: Settings,
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
            await start_fleet(conn, fleet, scenario.TEAM)
            print(f"demo: ready in {time.monotonic() - started:.1f} s\n", flush=True)
            async with MeshClient(conn) as client:
                run = DemoRun(conn, client, fleet, tail, quick, started)
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
        "\nWhere to look next (the namespace stays until the next `mesh demo`):\n"
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
    try:
        return asyncio.run(_demo(settings, scenario, fleet, quick, json_path, cleanup))
    finally:
        fleet.stop()  # Ctrl-C, or a failure before the summary: no process outlives us
        sys.stdout.flush()


__all__ = ["Member", "Scenario", "clear_namespace", "ensure_services", "run_demo"]
