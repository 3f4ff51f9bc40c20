"""The worker's structure at work on a real broker: middleware around every task, the
runtime as an async context manager with idempotent start/close, composed services."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import Agent, MeshClient, TaskContext
from mesh.connection import MeshConnection
from mesh.schemas import Result, TaskEnvelope
from mesh.services import start_registry, start_worker
from mesh.worker.middleware import CallNext, TaskRun, WorkerMiddleware
from mesh.worker.outcome import Outcome
from mesh.worker.runtime import WorkerRuntime
from tests.integration.dispatch_kit import start_router

pytestmark = pytest.mark.integration


class Seen(WorkerMiddleware):
    def __init__(self) -> None:
        self.runs: list[tuple[str, int, bool, str]] = []

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        outcome = await call_next(run)
        self.runs.append((run.task_id, run.visits, run.takeover, outcome.kind))
        return outcome


class Broken(WorkerMiddleware):
    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        raise RuntimeError("metrics backend bug")


def _echo() -> Agent:
    agent = Agent("mw.echo", "echoes")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"echo": task.payload}

    return agent


async def test_middleware_sees_each_claimed_task_and_a_broken_hook_is_skipped(
    conn: MeshConnection, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    await start_router(conn, add_cleanup)
    seen = Seen()
    async with (
        WorkerRuntime(_echo(), conn, middleware=[Broken(), seen], grace_s=2) as worker,
        MeshClient(conn) as client,
    ):
        await worker.start()  # a second start does nothing
        result = await client.request("echo", {"n": 1}, target="mw.echo", wait_s=10)
        await worker.run_until_idle()
    assert result.status == "completed" and result.output == {"echo": {"n": 1}}
    assert seen.runs == [(result.task_id, 1, False, "completed")]
    assert worker.executed == 1 and worker.completed == 1
    assert any(r.levelname == "CRITICAL" and "Broken" in r.getMessage() for r in caplog.records)
    await worker.close()  # closed already: nothing happens
    await worker.drain(1)


async def test_composed_services_stop_in_reverse_order_and_twice(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    await start_router(conn, add_cleanup)
    stop_registry = await start_registry(conn)
    add_cleanup(stop_registry)
    stop_worker = await start_worker(conn, _echo(), grace_s=2)
    add_cleanup(stop_worker)
    async with MeshClient(conn) as client:
        result = await client.request("echo", {"n": 2}, target="mw.echo", wait_s=15)
    assert result.status == "completed"
    await stop_worker()
    await stop_worker()  # an unwound stack has nothing left to close


async def test_a_result_is_encoded_once_for_the_commit_and_the_reply(
    conn: MeshConnection, add_cleanup: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker sends its callers the bytes its commit stored: one encoding a Result."""
    import mesh.dispatch.store
    import mesh.messaging
    import mesh.worker.answers

    encoded: list[str] = []
    for module in (mesh.dispatch.store, mesh.messaging, mesh.worker.answers):
        original = getattr(module, "encode", None)
        if original is None:
            continue

        def counted(model: Any, original: Any = original) -> bytes:
            if isinstance(model, Result):
                encoded.append(model.task_id)
            body: bytes = original(model)
            return body

        monkeypatch.setattr(module, "encode", counted)
    await start_router(conn, add_cleanup)
    async with WorkerRuntime(_echo(), conn, grace_s=2) as worker, MeshClient(conn) as client:
        result = await client.request("echo", {"n": 2}, target="mw.echo", wait_s=10)
        await worker.run_until_idle()
    assert result.status == "completed" and result.output == {"echo": {"n": 2}}
    assert encoded == [result.task_id]
