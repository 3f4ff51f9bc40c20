"""`MetricsEndpoint` serves a process's registry; `MetricsMiddleware` times handlers."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.metrics import Metrics, MetricsEndpoint, serve_metrics
from mesh.worker.middleware import DeadlineMiddleware, MetricsMiddleware, TaskRun, chain
from mesh.worker.outcome import Outcome


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=5) as answer:
        text = answer.read().decode()
    return {
        s.name + str(sorted(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


async def test_endpoint_on_an_ephemeral_port() -> None:
    metrics = Metrics(role="router", namespace="t")
    metrics.dispatched("a", "target", 0.001)
    endpoint = MetricsEndpoint(metrics, "127.0.0.1", 0)
    await endpoint.start()
    await endpoint.start()  # a second start does nothing
    try:
        assert endpoint.port > 0
        assert endpoint.url == f"http://127.0.0.1:{endpoint.port}/metrics"
        found = await asyncio.to_thread(scrape, endpoint.url)
        assert found["agent_reach_dispatches_total[('agent', 'a'), ('strategy', 'target')]"] == 1
        assert "process_cpu_seconds_total[]" in found
    finally:
        await endpoint.close()
        await endpoint.close()  # idempotent
    assert endpoint.port == 0


async def test_a_taken_port_names_the_setting() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match="MESH_METRICS_PORT"):
            await MetricsEndpoint(Metrics(role="router"), "127.0.0.1", port).start()


async def test_serve_metrics_only_when_a_port_is_set() -> None:
    assert await serve_metrics(Settings(), "worker") is None
    endpoint = await serve_metrics(Settings(metrics_port=0, namespace="abc"), "worker")
    assert endpoint is not None
    try:
        assert endpoint.metrics.role == "worker"
        found = await asyncio.to_thread(scrape, endpoint.url)
        assert found["agent_reach_process_info[('namespace', 'abc'), ('role', 'worker')]"] == 1
    finally:
        await endpoint.close()


class Run:
    """The part of a `TaskRun` the two hooks read."""

    def __init__(self, left_ms: int) -> None:
        self.executed = False
        self.lifetime_ms = 60_000
        self.ctx: Any = type("Ctx", (), {"time_left_ms": lambda _self: left_ms})()
        self.envelope: Any = type("Env", (), {"deadline_ms": 0})()
        self.task_id = "t1"


async def test_handler_time_by_outcome_even_when_cancelled_at_the_deadline() -> None:
    metrics = Metrics(role="worker", process=False)

    async def slow(run: TaskRun) -> Outcome:
        run.executed = True
        await asyncio.sleep(10)
        return Outcome("completed")

    async def quick(run: TaskRun) -> Outcome:
        run.executed = True
        return Outcome("failed")

    hooks = [MetricsMiddleware(metrics, "a"), DeadlineMiddleware()]
    run: Any = Run(left_ms=50)
    assert (await chain(hooks, slow)(run)).kind == "expired"
    assert (await chain(hooks, quick)(Run(left_ms=5_000))).kind == "failed"  # type: ignore[arg-type]
    assert (await chain(hooks, quick)(Run(left_ms=0))).kind == "expired"  # type: ignore[arg-type]
    counts = {
        (s.labels["agent"], s.labels["outcome"]): s.value
        for s in metrics.handler.collect()[0].samples
        if s.name.endswith("_count")
    }
    # cancelled at the deadline, and failed; the task that expired in the queue never ran
    assert counts == {("a", "expired"): 1.0, ("a", "failed"): 1.0}
