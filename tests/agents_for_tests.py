"""Agents, a leased membership and a subprocess entry point for the dispatch tests.

Run a worker in its own process (so a test can SIGKILL it)::

    python -m tests.agents_for_tests AGENT INSTANCE_ID

with ``MESH_*`` variables naming the namespace; it prints ``ready`` once consuming.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import Any

from mesh import Agent, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.registry.fencing import check_token, issue_token
from mesh.schemas import TaskEnvelope, now_ms
from mesh.worker.runtime import WorkerRuntime


class LeaseMembership:
    """A stand-in for the registry session: writes and renews the instance hash itself."""

    def __init__(self, conn: MeshConnection, agent_id: str, instance_id: str) -> None:
        self.conn = conn
        self.agent_id = agent_id
        self.instance_id = instance_id
        self._token = 0
        self._renew: asyncio.Task[None] | None = None

    @property
    def token(self) -> int:
        return self._token

    async def start(self, load: Callable[[], int], stuck: Callable[[], int] | None = None) -> None:
        self._token = await issue_token(self.conn.redis, self.conn.keys, self.agent_id)
        await self._write()
        self._renew = asyncio.create_task(self._renew_loop())

    async def _write(self) -> None:
        s = self.conn.settings
        await self.conn.redis.hset(
            self.conn.keys.instance(self.instance_id),
            mapping={
                "agent_id": self.agent_id,
                "token": self._token,
                "status": "up",
                "lease_expires_ms": now_ms() + int(s.lease_ttl_s * 1000),
            },
        )

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.conn.settings.heartbeat_s)
            await self._write()

    async def lose_lease(self) -> None:
        """Stop renewing and let the lease lapse now (a partitioned or paused instance)."""
        await self._stop_renewing()
        await self.conn.redis.hset(
            self.conn.keys.instance(self.instance_id), "lease_expires_ms", now_ms() - 1
        )

    async def check(self, token: int) -> None:
        await check_token(self.conn.redis, self.conn.keys, self.agent_id, self.instance_id, token)

    async def renew(self, stale_token: int, timeout_s: float) -> bool:
        return self._token != stale_token  # a lost lease stays lost: the tests lose it on purpose

    async def _stop_renewing(self) -> None:
        task, self._renew = self._renew, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def stop(self) -> None:
        await self._stop_renewing()
        await self.conn.redis.hset(self.conn.keys.instance(self.instance_id), "status", "down")


def effect_agent(state: MeshConnection, agent_id: str = "effect") -> Agent:
    """Counts every run, sleeps ``payload.sleep_s``, then applies its side effect once.

    The run counters are the test's own state, kept through `state` (a handler gets no
    Redis client from the mesh): ``side_effect("runs:<task_id>")`` and ``"total"``.
    """
    agent = Agent(agent_id, "Applies a counted side effect", max_concurrency=8)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        keys = state.keys
        await state.redis.incr(keys.side_effect(f"runs:{task.task_id}"))
        await asyncio.sleep(float(task.payload.get("sleep_s", 0)))
        applied = await ctx.apply_once(f"work:{task.task_id}")
        await state.redis.incr(keys.side_effect("total"))
        return {"applied": applied, "n": task.payload.get("n")}

    return agent


def failing_agent(state: MeshConnection, agent_id: str = "flaky") -> Agent:
    """Always fails with a transient error; records the time of each attempt (in `state`)."""
    agent = Agent(agent_id, "Never manages it")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        keys = state.keys
        await state.redis.rpush(keys.side_effect(f"attempts:{task.task_id}"), now_ms())
        raise ConnectionError(f"backend down (attempt {task.attempt})")

    return agent


AGENTS: dict[str, Callable[[MeshConnection], Agent]] = {
    "effect": effect_agent,
    "flaky": failing_agent,
}


async def _serve(agent_name: str, instance_id: str) -> None:
    settings = Settings.from_env()
    conn = await connect(settings, name=f"subprocess-{instance_id}")
    agent = AGENTS[agent_name](conn)
    membership = LeaseMembership(conn, agent.agent_id, instance_id)
    runtime = WorkerRuntime(agent, conn, instance_id=instance_id, membership=membership)
    await runtime.start()
    print("ready", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_serve(sys.argv[1], sys.argv[2]))
