"""Dead letters the broker refused are scraped from every watched component's publisher."""

from __future__ import annotations

from types import SimpleNamespace

from mesh.metrics import Metrics
from tests.unit.test_metrics import FakeAgent, FakeRouter, FakeWorker, value


def test_dropped_dead_letters_are_summed_by_reason_over_components() -> None:
    m = Metrics(role="mesh", process=False)
    router = FakeRouter(selector=object())
    router.publisher = SimpleNamespace(dropped={"invalid": 2})  # type: ignore[attr-defined]
    worker = FakeWorker(FakeAgent("a"))
    worker.publisher = SimpleNamespace(dropped={"invalid": 1, "retries": 4})  # type: ignore[attr-defined]
    m.watch("router", router)
    m.watch("worker", worker)
    m.watch("worker", FakeWorker(FakeAgent("b")))  # no publisher: nothing to add
    assert value(m, "agent_reach_dead_letters_dropped_total", reason="invalid") == 3
    assert value(m, "agent_reach_dead_letters_dropped_total", reason="retries") == 4
    router.publisher.dropped["invalid"] = 5  # type: ignore[attr-defined]
    assert value(m, "agent_reach_dead_letters_dropped_total", reason="invalid") == 6
