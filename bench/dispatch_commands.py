"""Redis commands per task of the dispatch records, counted exactly on a private Redis.

The load benchmark reads ``INFO commandstats`` of the whole shared server, which other
processes use too. This one starts a throw-away ``redis-server`` (never the shared one),
and runs the records of ``--tasks`` tasks one after the other as the mesh writes them with
access control off: a router's submission (submitted, routing, dispatched in one step), a
worker's fenced claim and commit, and the replied mark (`ReplyMarks`). With ``--access``,
as they are written under access control: the submission seeds the dispatch in the
agent's view, the worker claims and commits there and seals its Result, the router relays
the notice and marks the task replied. It prints the commands per task by name, the
scripts' own commands included (FCALL counts one, every ``redis.call`` inside it one
more).

    .venv/bin/python bench/dispatch_commands.py --tasks 500 [--access]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import redis.asyncio as redis_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.faults import PrivateRedis, free_port
from mesh.config import Settings
from mesh.dispatch import lua
from mesh.dispatch.store import Holder, ReplyMarks, TaskStore
from mesh.keys import Keys
from mesh.schemas import Result, TaskEnvelope


async def count(url: str, tasks: int, access: bool = False) -> dict[str, float]:
    redis = redis_asyncio.Redis.from_url(url)
    try:
        await lua.LIBRARY.load(redis)
        keys = Keys("bench")
        settings = Settings(namespace="bench", access_control=access)
        store = TaskStore(redis, keys, settings)  # the router's
        # the worker's: under access control its agent's view of the records
        view = TaskStore(redis, keys.for_agent("a") if access else keys, settings, instances=keys)
        lease_end = int(time.time() * 1000) + 3_600_000
        await redis.hset(
            keys.instance("w-1"),
            mapping={"token": 7, "status": "up", "lease_expires_ms": lease_end},
        )
        holder = Holder("w-1", 7, True)
        marks = ReplyMarks(store)  # the router's under access control, else the worker's
        await redis.config_resetstat()
        for i in range(tasks):
            envelope = TaskEnvelope.model_validate(
                {
                    "task_id": f"t{i}",
                    "trace_id": f"tr{i}",
                    "capability": "x",
                    "payload": {},
                    "reply_to": "reply.q",
                }
            )
            sub = await store.submit(
                envelope,
                redelivered=False,
                states=("submitted", "routing", "dispatched"),
                by="router",
                agent_id="a",
                sender="client-user" if access else "",
                seed_until=lease_end if access else None,
            )
            claim = await view.claim(
                envelope,
                holder,
                agent_id="a",
                redelivered=False,
                lifetime_end_ms=lease_end,
                count_visit=True,
                pristine=True,
            )
            result = Result.model_validate(
                {"task_id": envelope.task_id, "trace_id": envelope.trace_id, "status": "completed"}
            )
            commit = await view.finish(
                result,
                "completed",
                by="w-1",
                holder=holder,
                agent_id="a",
                with_waiters=not access,
                seal=access,
            )
            relayed = (
                (await store.relay(envelope.task_id, "a", by="router")).status if access else "ok"
            )
            if (sub.status, claim.status, commit.status, relayed) != ("new", "claimed", "ok", "ok"):
                raise RuntimeError(
                    f"task {i}: {sub.status} {claim.status} {commit.status} {relayed}"
                )
            marks.mark(envelope.task_id)
        await marks.close()
        stats = await redis.info("commandstats")
    finally:
        await redis.aclose()
    skip = {"config|resetstat", "info", "hello", "client|setinfo"}
    return {
        name.removeprefix("cmdstat_"): int(value["calls"]) / tasks
        for name, value in stats.items()
        if name.removeprefix("cmdstat_") not in skip
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--redis-port", type=int, default=6392, help="the private Redis port")
    parser.add_argument("--access", action="store_true", help="the records under access control")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dispatch-commands-") as folder:
        server = PrivateRedis(Path(folder), free_port(args.redis_port), aof=False)
        server.start()
        try:
            per_task = asyncio.run(count(server.url, args.tasks, args.access))
        finally:
            server.stop()
    total = sum(per_task.values())
    steps = (
        "submit, claim, commit, relay, replied mark"
        if args.access
        else "submit, claim, commit, replied mark"
    )
    print(f"Redis commands per task ({steps}): {total:.2f}")
    for name, calls in sorted(per_task.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {name:10s} {calls:6.2f}")


if __name__ == "__main__":
    main()
