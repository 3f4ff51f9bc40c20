"""Agents of the fault benchmark (bench/faults.py), one instance per `mesh worker` process.

``mesh worker bench.fault_agents:a07 --instance-id ...`` (cwd = the repository root) hosts
agent ``fault.a07``; ``bench.fault_agents:agents`` hosts all of them. ``FAULT_AGENTS``
(default 20) sets how many exist.

Every handler run writes to a *ledger*: a Redis server named by ``FAULT_LEDGER_URL``
(keys ``<namespace>:ledger:*``), kept apart from the mesh's own Redis so that a Redis
restart of the mesh cannot erase what the bench counts:

- ``<ns>:ledger:starts``: one ``"<task_id> <instance_id> <ms>"`` entry per handler start;
- ``<ns>:ledger:applied``: one such entry per side effect actually applied, i.e. each time
  ``ctx.apply_once("work")`` returned True and the handler then performed the effect.

The handler sleeps ``payload["ms"]`` / 2 ms, applies its side effect through
``ctx.apply_once``, sleeps the other half and answers ``{"ok": True}``: a SIGKILL can land
before, between or after the effect. Without ``FAULT_LEDGER_URL`` nothing is recorded.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis.asyncio as redis_asyncio

from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

#: topics of the agents' capability texts (semantic mode routes on them)
TOPICS = (
    "weather forecasts",
    "train timetables",
    "currency exchange rates",
    "recipe suggestions",
    "password resets",
    "parcel tracking",
    "hotel bookings",
    "insurance claims",
    "tax questions",
    "gym memberships",
    "car rentals",
    "concert tickets",
    "library loans",
    "phone plans",
    "pet adoption",
    "flight delays",
    "garden advice",
    "movie reviews",
    "job applications",
    "bike repairs",
)
#: the effect name the handler applies once per task
EFFECT = "work"

_ledger: redis_asyncio.Redis | None = None


def agent_id(k: int) -> str:
    return f"fault.a{k:02d}"


def topic(k: int) -> str:
    base = TOPICS[k % len(TOPICS)]
    return base if k < len(TOPICS) else f"{base} (desk {k // len(TOPICS)})"


def ledger_keys(namespace: str) -> tuple[str, str]:
    """(starts list, applied list) of the ledger of `namespace`."""
    return f"{namespace}:ledger:starts", f"{namespace}:ledger:applied"


def ledger() -> redis_asyncio.Redis | None:
    global _ledger
    url = os.environ.get("FAULT_LEDGER_URL")
    if not url:
        return None
    if _ledger is None:
        _ledger = redis_asyncio.Redis.from_url(url)
    return _ledger


def _entry(task_id: str, instance_id: str) -> str:
    return f"{task_id} {instance_id} {int(time.time() * 1000)}"


async def _handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    led = ledger()
    starts, applied = ledger_keys(os.environ.get("MESH_NAMESPACE", "mesh"))
    if led is not None:
        await led.rpush(starts, _entry(task.task_id, ctx.instance_id))
    half_s = float(task.payload.get("ms", 0) or 0) / 2000.0
    if half_s > 0:
        await asyncio.sleep(half_s)
    if await ctx.apply_once(EFFECT) and led is not None:
        await led.rpush(applied, _entry(task.task_id, ctx.instance_id))  # the side effect
    if half_s > 0:
        await asyncio.sleep(half_s)
    return {"ok": True}


def build_agent(k: int) -> Agent:
    agent = Agent(
        agent_id(k),
        f"Answers questions about {topic(k)}.",
        examples=[f"I have a question about {topic(k)}", f"help me with {topic(k)}"],
        max_concurrency=int(os.environ.get("FAULT_CONCURRENCY", "16")),
    )
    agent.handler(_handle)
    return agent


agents: list[Agent] = [build_agent(k) for k in range(int(os.environ.get("FAULT_AGENTS", "20")))]


def __getattr__(name: str) -> Agent:
    """``a07`` -> agent ``fault.a07`` (what `mesh worker bench.fault_agents:a07` imports)."""
    if len(name) == 3 and name[0] == "a" and name[1:].isdigit() and int(name[1:]) < len(agents):
        return agents[int(name[1:])]
    raise AttributeError(name)
