"""The /metrics endpoints of a router, a registry and a worker serve the counters of real
traffic (parsed with prometheus_client's parser); `mesh registry` serves one when
MESH_METRICS_PORT is set."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mesh import MeshClient, Retry
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.metrics import Metrics, MetricsEndpoint
from mesh.router.embedding import CachedEmbedder, HashEmbedder
from mesh.schemas import TaskEnvelope
from mesh.services import start_registry, start_semantic_router, start_worker
from mesh.worker.agent import Agent
from tests.conftest import ROUTABLE_S, Cleanup, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(namespace: str) -> Settings:
    """The tests count registrations exactly, and leases are not what they test: a lease of
    5 s (not the suite's 1.5 s) survives a loaded CI core stalling a process's loop for over
    a second (it once lapsed right after registering, and the instance registered again)."""
    return Settings.from_env(namespace=namespace, heartbeat_s=0.5, lease_ttl_s=5.0)


ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
ECHO_TEXT = "Repeats what it is told, word for word."

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample served at `url`: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def get(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def served(url: str, check: Callable[[Samples], bool], timeout: float = 10.0) -> Samples:
    """Scrape `url` until `check` holds (the figures of events still in flight arrive)."""
    last: Samples = {}

    async def ok() -> bool:
        nonlocal last
        last = await asyncio.to_thread(scrape, url)
        return check(last)

    try:
        await wait_until(ok, timeout=timeout, interval=0.1)
    except AssertionError:
        mine = {k: v for k, v in last.items() if k[0].startswith("agent_reach")}
        raise AssertionError(f"{url} never served the expected figures; last: {mine}") from None
    return last


def echo_agent() -> Agent:
    echo = Agent("echo", ECHO_TEXT, max_concurrency=4)

    @echo.handler
    async def handle(task: TaskEnvelope, ctx: Any) -> dict[str, Any]:
        mode = task.payload.get("mode")
        if mode == "fail":
            raise ValueError("told to fail")
        if mode == "retry" and task.attempt == 0:
            raise Retry("once more", delay_ms=1_000)
        return {"said": task.capability}

    return echo


async def endpoint_of(role: str, namespace: str, add_cleanup: Cleanup) -> MetricsEndpoint:
    endpoint = MetricsEndpoint(Metrics(role=role, namespace=namespace), "127.0.0.1", 0)
    await endpoint.start()
    add_cleanup(endpoint.close)
    return endpoint


@pytest.mark.slow
async def test_router_registry_and_worker_serve_their_counters(
    mesh_env: Callable[..., Awaitable[MeshConnection]], add_cleanup: Cleanup
) -> None:
    conn = await mesh_env()
    ns = conn.settings.namespace
    registry, router, worker = [
        await endpoint_of(role, ns, add_cleanup) for role in ("registry", "router", "worker")
    ]
    add_cleanup(await start_registry(conn, metrics=registry.metrics))
    embedder = CachedEmbedder(HashEmbedder())
    embedder.start()
    selector, stop_router = await start_semantic_router(conn, embedder, metrics=router.metrics)
    add_cleanup(stop_router)
    add_cleanup(await start_worker(conn, echo_agent(), grace_s=2, metrics=worker.metrics))
    await selector.wait_routable(["echo"], timeout=ROUTABLE_S)
    client = MeshClient(conn)
    await client.start()
    add_cleanup(client.close)

    results = await asyncio.gather(
        *(client.request(f"say {n}", target="echo", wait_s=15) for n in range(3)),
        client.request(ECHO_TEXT, wait_s=15),  # semantic: the agent's own words
        client.request("fail", {"mode": "fail"}, target="echo", wait_s=15),
        client.request("retry", {"mode": "retry"}, target="echo", wait_s=15),
        client.request("nobody", target="nobody", wait_s=15),
    )
    assert [r.status for r in results] == [*["completed"] * 4, "failed", "completed", "unroutable"]
    assert results[3].route is not None and results[3].route.strategy == "semantic"

    found = await served(
        router.url,
        lambda s: (
            get(s, "agent_reach_breaker_state", agent="echo", state="closed") == 1
            and get(s, "agent_reach_router_messages_total") >= 7
        ),
    )
    assert get(found, "agent_reach_dispatches_total", agent="echo", strategy="target") == 5
    assert get(found, "agent_reach_dispatches_total", agent="echo", strategy="semantic") == 1
    assert get(found, "agent_reach_routing_seconds_count", strategy="target") == 5
    assert get(found, "agent_reach_reroutes_total", agent="nobody", reason="unbound") == 1
    assert get(found, "agent_reach_tasks_total", agent="", strategy="", status="unroutable") == 1
    assert get(found, "agent_reach_dead_letters_total", reason="unroutable") == 1
    assert get(found, "agent_reach_agents_live") == 1
    assert get(found, "agent_reach_instances_live", agent="echo") == 1
    assert get(found, "agent_reach_embedding_cache_misses_total") >= 1
    assert get(found, "agent_reach_process_info", role="router", namespace=ns) == 1

    found = await served(
        worker.url,
        lambda s: (
            get(s, "agent_reach_tasks_total", agent="echo", strategy="target", status="completed")
            == 4
        ),
    )
    labels = {"agent": "echo", "strategy": "target"}
    assert get(found, "agent_reach_tasks_total", status="failed", **labels) == 1
    assert get(
        found, "agent_reach_tasks_total", status="completed", agent="echo", strategy="semantic"
    )
    assert get(found, "agent_reach_retries_total", agent="echo") == 1
    assert get(found, "agent_reach_handler_seconds_count", agent="echo", outcome="retry") == 1
    assert get(found, "agent_reach_handler_seconds_count", agent="echo", outcome="completed") == 5
    # every dispatch was stamped by the router; the retry came through its delay queue
    assert get(found, "agent_reach_queue_wait_seconds_count", agent="echo") == 6
    assert get(found, "agent_reach_end_to_end_seconds_count", agent="echo", status="completed") == 5
    assert get(found, "agent_reach_worker_in_flight", agent="echo") == 0
    assert get(found, "agent_reach_worker_slots", agent="echo") == 4
    assert get(found, "agent_reach_worker_deliveries_total", agent="echo") == 7

    found = await served(
        registry.url,
        lambda s: (
            get(s, "agent_reach_registry_leases_live") == 1
            and get(s, "agent_reach_registry_heartbeats_total") >= 1
        ),
    )
    assert get(found, "agent_reach_registry_registrations_total") == 1
    # what one process records, the others do not: their registries are their own
    assert get(found, "agent_reach_dispatches_total", agent="echo", strategy="target") == 0


async def test_mesh_registry_serves_metrics_on_an_ephemeral_port(
    settings: Settings, mesh_env: Callable[..., Awaitable[MeshConnection]]
) -> None:
    await mesh_env()  # the namespace is purged at teardown
    ns = settings.namespace
    env = {**os.environ, "MESH_NAMESPACE": ns, "MESH_METRICS_PORT": "0"}
    proc = await asyncio.create_subprocess_exec(
        MESH, "registry", cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        match = re.search(rb"registry metrics on (http://\S+/metrics)", line)
        assert match, line
        found = await served(
            match.group(1).decode(),
            lambda s: get(s, "agent_reach_process_info", role="registry", namespace=ns) == 1,
        )
        assert ("agent_reach_registry_heartbeats_total", ()) in found
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), timeout=30) == 0


async def test_the_observer_serves_the_queue_depths_of_its_namespace(
    conn: MeshConnection, settings: Settings, add_cleanup: Cleanup, tmp_path: Path
) -> None:
    from mesh.observer import Observer

    conn.settings = settings.model_copy(update={"observer_log_dir": tmp_path})
    add_cleanup(await start_registry(conn))
    endpoint = await endpoint_of("observer", settings.namespace, add_cleanup)
    observer = Observer(conn, metrics=endpoint.metrics)
    await observer.start()
    add_cleanup(observer.close)
    registry_queue = conn.topology.registry
    found = await served(
        endpoint.url,
        lambda s: get(s, "agent_reach_queue_consumers", queue=registry_queue) >= 1,
        timeout=20,
    )
    assert get(found, "agent_reach_management_up") == 1
    observer_queue = observer.queue_name
    assert ("agent_reach_queue_messages_ready", (("queue", observer_queue),)) in found
