"""A Redis stall (a long script from a privileged login) does not take the mesh down.

While a script runs, Redis answers nobody for ``busy-reply-threshold`` (5 s), then BUSY
to every other command until the script ends. The registry keeps the heartbeats it could
not apply and applies them first when Redis is back, so no lease whose holder beat in time
lapses; every loop logs the outage once and recovers by itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
import redis.asyncio as redis_asyncio

from mesh import Agent, MeshClient, TaskContext, WorkerRuntime
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.registry.service import RegistryService
from mesh.registry.session import RegistrySession
from mesh.router.service import RouterService
from mesh.schemas import TaskEnvelope, new_id
from tests.conftest import wait_until
from tests.integration.test_registry import EventLog

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.exclusive,
    pytest.mark.access_off("one mesh"),
]

#: how long the script blocks Redis
STALL_S = 10.0
#: how soon after the stall the mesh must answer again
RESUME_S = 5.0
#: busy-waits ARGV[1] seconds by Redis' clock (what a runaway script looks like)
STALL_LUA = """
local function now() local t = redis.call('TIME') return t[1] * 1000000 + t[2] end
local start = now()
while now() - start < tonumber(ARGV[1]) * 1000000 do end
return 1
"""


@pytest.fixture(params=["classic", "quorum"])
def settings(namespace: str, request: pytest.FixtureRequest) -> Settings:
    # the default lease (15 s) outlives the stall; beats every 2 s renew it during it. In
    # quorum mode every requeue counts against the router queue's delivery limit (5): a
    # router that requeued the request sent into the stall at each BUSY lost it
    return Settings.from_env(
        namespace=namespace, heartbeat_s=2.0, lease_ttl_s=15.0, queue_type=request.param
    )


def echo_agent() -> Agent:
    agent = Agent("stall-echo", "Echoes the payload back")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"echo": task.payload}

    return agent


async def test_a_ten_second_script_stalls_redis_and_the_mesh_resumes_within_five_seconds(
    conn: MeshConnection,
    settings: Settings,
    add_cleanup: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = EventLog()
    await log.start(conn)
    registry = RegistryService(conn)
    await registry.start()
    add_cleanup(registry.close)
    router = RouterService(conn)
    await router.start()
    add_cleanup(router.close)
    agent = echo_agent()
    instance_id = f"{agent.agent_id}-{new_id()[:8]}"
    session = RegistrySession(conn, agent.registration(instance_id))
    worker = WorkerRuntime(agent, conn, instance_id=instance_id, membership=session)
    await worker.start()
    add_cleanup(lambda: worker.drain(grace_s=2))
    token = session.token
    loop = asyncio.get_running_loop()
    async with MeshClient(conn) as client:
        before = await client.request("before", {"n": 0}, target=agent.agent_id, wait_s=10)
        assert before.status == "completed"
        # the test's own login (no ACL): it waits for its script as long as it runs
        privileged = redis_asyncio.Redis.from_url(
            settings.redis_url.get_secret_value(), socket_timeout=None
        )
        add_cleanup(privileged.aclose)
        caplog.set_level(logging.INFO)
        # the process's outage log of the shared Redis: an earlier test's stall within a
        # minute must not hold this one's WARNING back
        conn.outages.redis.limiter.reset()
        started = loop.time()

        async def run_stall() -> Any:
            return await privileged.eval(STALL_LUA, 0, STALL_S)

        stall = asyncio.create_task(run_stall())
        await asyncio.sleep(0.2)  # the script is running: a request sent into the stall
        during = asyncio.create_task(
            client.request("during", {"n": 1}, target=agent.agent_id, wait_s=STALL_S + 30)
        )
        assert await stall == 1
        ended = loop.time()
        assert ended - started >= STALL_S - 0.5
        after = await client.request("after", {"n": 2}, target=agent.agent_id, wait_s=RESUME_S)
        resumed_s = loop.time() - ended
        assert after.status == "completed" and after.output == {"echo": {"n": 2}}
        assert resumed_s < RESUME_S, resumed_s
        late = await during
        assert late.status == "completed" and late.output == {"echo": {"n": 1}}
    # no lease was lost: the session never re-registered, nobody reported it down
    assert session.registrations == 1 and session.token == token
    assert registry.stats["lost"] == 0 and registry.stats["down"] == 0
    assert not log.find("agent.down", instance_id)
    state = await conn.redis.hmget(conn.keys.instance(instance_id), "status", "token")
    assert state == [b"up", str(token).encode()]
    # the registry saw the outage and is healthy again (no restart) within the resume
    # budget, counted from the stall's end (its next flush or sweep says so: a moment after
    # the mesh answered, on a loaded core); the process said it once (its registry and
    # router share one outage log of that Redis), and that it ended
    health = registry.redis_health
    await wait_until(lambda: health.healthy, timeout=max(0.1, RESUME_S - (loop.time() - ended)))
    assert health.outages >= 1
    outage = [r for r in caplog.records if r.name == "mesh.outage"]
    said = [r for r in outage if r.levelno == logging.WARNING]
    assert len(said) == 1 and "Redis at" in said[0].getMessage(), [r.getMessage() for r in said]
    assert "BUSY" in said[0].getMessage() or "Busy" in said[0].getMessage()
    assert any("is back after" in r.getMessage() for r in outage if r.levelno == logging.INFO)
    print(f"stall {ended - started:.1f}s; mesh answered {resumed_s:.2f}s after it ended")
