"""Redis loses everything under load (restarted without persistence): every accepted task
still gets exactly one terminal Result, and a side effect guarded by `apply_once` is never
applied twice: where the mesh cannot know whether it ran, the task fails saying so."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.dispatch.store import TaskStore
from mesh.errors import StaleFencingToken
from mesh.registry.fencing import check_token
from mesh.registry.lease import LeaseStore
from mesh.schemas import Registration, Result, TaskEnvelope
from mesh.services import start_registry, start_worker
from tests.conftest import purge, wait_until
from tests.integration.dispatch_kit import OrderedSelector, declare_idle_agents, start_router

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TASKS = 240
RATE_PER_S = 60.0


def _paying_agent(applied: Counter[str]) -> Agent:
    """Applies one payment per task (guarded by apply_once); `applied` counts real ones."""
    agent = Agent("pay", "Pays once per task", max_concurrency=8)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        await asyncio.sleep(0.15)
        if await ctx.apply_once("payment"):
            applied[task.task_id] += 1
        await asyncio.sleep(0.05)
        return {"n": task.payload["n"]}

    return agent


#: every key of a pattern deleted in one atomic step (the test's own Redis login)
_FORGET = """
local keys = redis.call('KEYS', ARGV[1])
for i = 1, #keys, 1000 do
  redis.call('DEL', unpack(keys, i, math.min(i + 999, #keys)))
end
return #keys
"""


async def _forget_everything(conn: MeshConnection) -> int:
    """What a Redis restart without persistence does to the namespace: every key gone at
    once (a SCAN then DEL could keep a key a claim wrote between them and drop its twin)."""
    return int(await conn.redis.eval(_FORGET, 0, conn.keys.pattern()))


async def test_redis_emptied_under_load_loses_no_task_and_repeats_no_side_effect(
    mesh_env: Any, add_cleanup: Any
) -> None:
    conn: MeshConnection = await mesh_env("-mesh")
    conn_c: MeshConnection = await mesh_env("-client")
    applied: Counter[str] = Counter()
    add_cleanup(await start_registry(conn))
    await start_router(conn, add_cleanup)
    for i in range(2):
        add_cleanup(
            await start_worker(conn, _paying_agent(applied), instance_id=f"pay-{i}", grace_s=2)
        )
    wiped: list[int] = []

    async def submit(client: MeshClient, i: int) -> Result:
        await asyncio.sleep(i / RATE_PER_S)  # open loop: arrivals on a schedule
        if i in (TASKS // 3, 2 * TASKS // 3):
            wiped.append(await _forget_everything(conn))
        envelope = TaskEnvelope(capability="pay", target="pay", payload={"n": i})
        return await client.send(envelope, wait_s=60)

    async with MeshClient(conn_c) as client:
        results = await asyncio.gather(*(submit(client, i) for i in range(TASKS)))
        await asyncio.sleep(0)
        assert client.results_received >= TASKS
    assert len(wiped) == 2 and all(n > 0 for n in wiped)
    by_status = Counter(r.status for r in results)
    codes = Counter(r.error.code for r in results if r.error is not None)
    assert len({r.task_id for r in results}) == TASKS  # one terminal Result each
    assert max(applied.values()) == 1, f"applied twice: {applied.most_common(3)}"
    for r in results:
        if r.status == "completed":
            assert applied[r.task_id] == 1, r
    # the only failures allowed: tasks whose effect the mesh could not know about
    assert set(codes) <= {"effect_unknown"}, codes
    assert by_status["completed"] >= TASKS * 0.8, (by_status, codes)
    print(f"{TASKS} tasks, keys wiped {wiped}: {dict(by_status)} {dict(codes)}")


async def test_tokens_after_redis_loss_are_greater_than_any_issued_before(
    conn: MeshConnection,
) -> None:
    leases = LeaseStore(conn.redis, conn.keys, lease_ttl_s=5)
    registration = Registration(
        agent_id="fence.a", instance_id="fence.a-1", capability_text="fences"
    )
    before = [(await leases.grant(registration)).token for _ in range(3)]
    assert before == sorted(set(before))
    await _forget_everything(conn)
    after = (await leases.grant(registration)).token
    assert after > max(before)
    stored = await conn.redis.hget(conn.keys.instance("fence.a-1"), "token")
    assert int(stored) == after  # exact: no float formatting on the way into the hash
    await check_token(conn.redis, conn.keys, "fence.a", "fence.a-1", after)
    with pytest.raises(StaleFencingToken):
        await check_token(conn.redis, conn.keys, "fence.a", "fence.a-1", max(before))


@pytest.fixture
def quick_settings(namespace: str) -> Settings:
    return Settings.from_env(
        namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5, accept_timeout_ms=1500
    )


@pytest.mark.exclusive  # its spans are stretched when other tests share the cores
async def test_a_dispatch_returned_after_redis_lost_its_record_is_still_answered(
    quick_settings: Settings, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The dispatch waits in a queue nobody consumes; Redis forgets the task; the dispatch
    expires back to the router, which must answer it (here: no other agent, unroutable)
    instead of dropping it as if it had finished."""
    conn = await connect(quick_settings, name="redis-loss-returned")
    add_cleanup(conn.close)
    add_cleanup(lambda: purge(quick_settings))
    await start_router(conn, add_cleanup, OrderedSelector("idle", "other"))
    await declare_idle_agents(conn, "idle")
    async with MeshClient(conn) as client:
        envelope = TaskEnvelope(capability="work", timeout_ms=20_000)
        waiting = asyncio.create_task(client.send(envelope, wait_s=15))
        store = TaskStore(conn.redis, conn.keys, conn.settings)

        async def dispatched() -> bool:
            return (await store.state(envelope.task_id)).get("state") == "dispatched"

        await wait_until(dispatched, timeout=5)
        await _forget_everything(conn)  # well inside the 1.5 s the dispatch waits
        result = await waiting
    assert result.status == "unroutable", result
    assert (await store.state(result.task_id)).get("state") == "unroutable"
    assert any("its record was gone" in r.getMessage() for r in caplog.records)
