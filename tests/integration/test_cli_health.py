"""`mesh health`: 0 while a role is connected and consuming, 1 with a sentence otherwise
(a stopped consumer fails the probe). It asks the broker by passive declares, so the answer
is of now: healthy as soon as the router has started, unhealthy as soon as it stopped (the
management API's counts lagged by its stats interval, 5 s and more)."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mesh.cli.health import check
from mesh.connection import MeshConnection, connect
from mesh.errors import Unhealthy
from mesh.services import start_registry, start_worker
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import declare_idle_agents, start_router

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")


async def _healthy(conn: MeshConnection, *args: Any) -> bool:
    try:
        await check(conn, *args)
    except Unhealthy:
        return False
    return True


async def _wait(conn: MeshConnection, want: bool, *args: Any) -> None:
    """For a worker: its lease is written by the registry once the registration arrives."""

    async def reached() -> bool:
        return await _healthy(conn, *args) == want

    await wait_until(reached, timeout=20, interval=0.5)


async def test_health_follows_the_consumers(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    await declare_idle_agents(conn, "effect")
    with pytest.raises(Unhealthy, match="no router consumes"):
        await check(conn, "router", None, None)
    router = await start_router(conn, add_cleanup)
    # at once: no stats interval to wait for
    assert (await check(conn, "router", None, None)).endswith(conn.topology.router_queue)
    env = {**os.environ, "MESH_NAMESPACE": conn.settings.namespace}
    done = await asyncio.to_thread(
        subprocess.run,
        [MESH, "health", "router"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0 and done.stdout.startswith("healthy: "), done

    add_cleanup(await start_registry(conn))
    stop_worker = await start_worker(conn, effect_agent(conn), instance_id="effect-1", grace_s=1)
    await _wait(conn, True, "worker", "effect", "effect-1")
    await stop_worker()  # a stopped consumer: unhealthy
    await _wait(conn, False, "worker", "effect", None)
    await router.close()
    with pytest.raises(Unhealthy, match="no router consumes"):
        await check(conn, "router", None, None)
    done = await asyncio.to_thread(
        subprocess.run,
        [MESH, "health", "router"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1 and "unhealthy: no router consumes" in done.stderr, done


async def test_each_service_command_probes_its_role_with_check(
    conn: MeshConnection, add_cleanup: Any, tmp_path: Path
) -> None:
    """``mesh registry --check`` (and router, worker) is the same probe: it runs nothing."""
    await declare_idle_agents(conn, "effect")
    env = {**os.environ, "MESH_NAMESPACE": conn.settings.namespace}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [MESH, *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
        )

    done = await asyncio.to_thread(run, "registry", "--check")
    assert done.returncode == 1 and "unhealthy:" in done.stderr, done
    add_cleanup(await start_registry(conn))
    done = await asyncio.to_thread(run, "registry", "--check")
    assert done.returncode == 0 and done.stdout.startswith("healthy: "), done
    done = await asyncio.to_thread(run, "router", "--check")
    assert done.returncode == 1 and "no router consumes" in done.stderr, done
    done = await asyncio.to_thread(
        run, "worker", "agents.support:refunds", "--check", "--app-dir", str(ROOT)
    )
    assert done.returncode == 1 and "support.refunds" in done.stderr, done


async def test_health_says_when_the_namespace_has_no_topology(
    conn: MeshConnection, request: pytest.FixtureRequest, add_cleanup: Any
) -> None:
    settings = conn.settings.model_copy(update={"namespace": conn.settings.namespace + "-none"})
    other = await connect(settings, name=request.node.nodeid)
    add_cleanup(other.close)
    with pytest.raises(Unhealthy, match=r"is not on the broker: namespace .* has no topology"):
        await check(other, "router", None, None)
    with pytest.raises(Unhealthy, match="is not on the broker"):
        await check(other, "worker", "effect", None)
