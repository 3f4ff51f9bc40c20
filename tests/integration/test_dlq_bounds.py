"""Dead-letter queues are bounded by default: past ``MESH_DEAD_LETTER_MAX_LENGTH`` the
broker refuses a letter and its sender counts the drop (`Publisher.dropped`, the
``dead_letters_dropped`` metric, one WARNING and an alert); ``MESH_DEAD_LETTER_TTL_S`` ages
letters out. `mesh dlq purge` empties a queue, `mesh dlq replay --target` sends the
replayed tasks to another agent."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.dispatch.dead_letters import peek
from mesh.messaging import Publisher
from mesh.schemas import TaskEnvelope, encode
from mesh.topology import Topology
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")


@pytest.fixture
def settings(namespace: str, request: pytest.FixtureRequest) -> Settings:
    bounds: dict[str, Any] = getattr(request, "param", {})
    return Settings.from_env(namespace=namespace, heartbeat_s=0.5, lease_ttl_s=1.5, **bounds)


async def _depth(conn: MeshConnection, queue: str) -> int:
    channel = await conn.channel(confirms=False)
    try:
        declared = await channel.declare_queue(queue, passive=True)
        return int(declared.declaration_result.message_count or 0)
    finally:
        await channel.close()


async def _declared(conn: MeshConnection) -> Publisher:
    channel = await conn.channel()
    await conn.topology.declare(channel)
    await channel.close()
    publisher = Publisher(conn)
    await publisher.start()
    return publisher


def test_dead_letter_queues_are_bounded_by_default() -> None:
    spec = Topology().static_spec()
    dead = [q for q in spec.queues if ".dead." in q.name]
    assert dead
    for q in dead:
        assert q.arguments["x-max-length"] == 100_000
        assert q.arguments["x-overflow"] == "reject-publish"
        assert q.arguments["x-message-ttl"] == 7 * 86_400 * 1000
    unbounded_age = Topology(dead_letter_ttl_s=0).static_spec()
    assert all(
        "x-message-ttl" not in q.arguments for q in unbounded_age.queues if ".dead." in q.name
    )


@pytest.mark.parametrize("settings", [{"dead_letter_max_length": 2}], indirect=True)
async def test_a_full_dead_letter_queue_refuses_and_the_drop_is_reported(
    conn: MeshConnection, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    publisher = await _declared(conn)
    add_cleanup(publisher.close)
    caplog.set_level(logging.WARNING, logger="mesh")
    kept = [
        await publisher.dead_letter("expired", encode(TaskEnvelope(capability=f"t{i}")))
        for i in range(3)
    ]
    assert kept == [True, True, False]
    assert publisher.dropped == {"expired": 1}
    assert await _depth(conn, conn.topology.dead_queue("expired")) == 2
    assert any("dropped" in r.getMessage() for r in caplog.records), caplog.records


@pytest.mark.parametrize("settings", [{"dead_letter_ttl_s": 1}], indirect=True)
async def test_dead_letters_age_out_after_the_ttl(conn: MeshConnection, add_cleanup: Any) -> None:
    publisher = await _declared(conn)
    add_cleanup(publisher.close)
    queue = conn.topology.dead_queue("retries")
    assert await publisher.dead_letter("retries", encode(TaskEnvelope(capability="old")))
    assert await _depth(conn, queue) == 1

    async def gone() -> bool:
        return await _depth(conn, queue) == 0

    await wait_until(gone, timeout=15, interval=0.25)


def _mesh(conn: MeshConnection, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MESH_NAMESPACE": conn.settings.namespace}
    return subprocess.run(
        [MESH, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


async def test_replay_to_another_agent_then_purge(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    await start_router(conn, add_cleanup)
    async with MeshClient(conn) as client:
        dead = [await client.request("do", {"n": n}, target="gone", wait_s=20) for n in range(3)]
    assert {r.status for r in dead} == {"unroutable"}  # nobody serves "gone"
    queue = conn.topology.dead_queue("unroutable")

    async def three() -> bool:
        return await _depth(conn, queue) == 3

    await wait_until(three, timeout=10, interval=0.1)
    await start_worker(conn, add_cleanup, effect_agent(conn))
    done = await asyncio.to_thread(
        _mesh, conn, "dlq", "replay", "unroutable", "--target", "effect", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    [line] = done.stdout.splitlines()
    old, new = line.removeprefix("replayed ").removesuffix(" for effect").split(" as ")
    assert old == dead[0].task_id
    # the new task ran on the agent it was sent to (its own target had none)
    runs = conn.keys.side_effect(f"runs:{new}")

    async def ran() -> bool:
        return await conn.redis.get(runs) == b"1"

    await wait_until(ran, timeout=15, interval=0.1)
    assert len(await peek(conn, "unroutable")) == 2

    refused = await asyncio.to_thread(_mesh, conn, "dlq", "purge", "unroutable", cwd=tmp_path)
    assert refused.returncode == 2 and "pass --yes" in refused.stderr, refused
    assert await _depth(conn, queue) == 2
    purged = await asyncio.to_thread(
        _mesh, conn, "dlq", "purge", "unroutable", "--yes", cwd=tmp_path
    )
    assert purged.returncode == 0, purged.stderr
    assert purged.stdout.strip() == f"deleted 2 dead letter(s) from {queue}"
    assert await _depth(conn, queue) == 0
    bad = await asyncio.to_thread(
        _mesh, conn, "dlq", "replay", "expired", "--target", "Bad Id!", cwd=tmp_path
    )
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad
    assert "--target must be 1-128 characters" in bad.stderr
