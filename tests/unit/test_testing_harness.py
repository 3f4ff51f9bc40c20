"""`mesh.testing.AgentHarness`: a handler's whole `TaskContext` API, in memory."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from mesh import Agent, Reject, Retry, StaleFencingToken, TaskContext
from mesh.config import Settings
from mesh.errors import ContextNotFound
from mesh.schemas import TaskEnvelope
from mesh.testing import AgentHarness
from mesh.worker.middleware import CallNext, TaskRun, WorkerMiddleware
from mesh.worker.outcome import Outcome

#: the README's mesh.testing example, exactly as printed there
README_EXAMPLE = """\
from mesh import Agent
from mesh.testing import AgentHarness

refunds = Agent("support.refunds", "Handles refunds of purchased products")


@refunds.handler
async def handle(task, ctx):
    if await ctx.apply_once("refund"):  # a rerun of the same task skips the pay-out
        await ctx.handoff("billing", task.payload)
    return {"refund_id": f"RF-{task.payload['order_id']}"}


def test_a_redelivered_refund_pays_out_once():  # plain pytest: no plugin needed
    harness = AgentHarness(refunds, stubs={"billing": {"paid": True}})
    first = harness.run_sync({"order_id": "42"})
    again = harness.run_sync({"order_id": "42"}, task_id=first.task_id)
    assert first.output == again.output == {"refund_id": "RF-42"}
    assert harness.effects["refund"] == 1 and len(harness.handoffs) == 1
"""


def test_the_readme_example_runs_as_printed() -> None:
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(README_EXAMPLE, "README.md", "exec"), namespace)
    namespace["test_a_redelivered_refund_pays_out_once"]()


def test_run_sync_keeps_the_harness_state_across_calls() -> None:
    agent = _agent()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"applied": await ctx.apply_once("x")}

    harness = AgentHarness(agent)
    first = harness.run_sync({"n": 1})
    again = harness.run_sync({"n": 1}, task_id=first.task_id)
    other = harness.run_sync({"n": 2})
    assert first.status == again.status == other.status == "completed"
    assert [first.output, again.output, other.output] == [
        {"applied": True},
        {"applied": False},
        {"applied": True},
    ]
    assert harness.effects["x"] == 2 and len(harness.runs) == 3


async def test_run_sync_inside_an_event_loop_says_to_await_run() -> None:
    harness = AgentHarness(_agent())
    with pytest.raises(RuntimeError, match=r"await harness\.run"):
        harness.run_sync({})


def test_the_readme_prints_the_example_once_it_documents_the_harness() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    if "mesh.testing" in readme:
        assert README_EXAMPLE in readme


def test_the_harness_imports_no_broker_or_redis_client_code_of_its_own() -> None:
    source = Path(sys.modules["mesh.testing"].__file__ or "").read_text()
    for name in ("aio_pika", "aiormq", "redis", "mesh.connection", "mesh.client"):
        assert f"import {name}" not in source and f"from {name}" not in source


def _agent(agent_id: str = "a") -> Agent:
    return Agent(agent_id, "does things")


async def test_completed_with_the_real_context() -> None:
    agent = _agent()
    seen: list[TaskContext] = []

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        seen.append(ctx)
        await ctx.fence()
        return {"echo": task.payload, "left": ctx.time_left_ms() > 0}

    harness = AgentHarness(agent)
    result = await harness.run({"x": 1}, capability="echo")
    assert result.status == "completed" and result.output == {"echo": {"x": 1}, "left": True}
    assert result.agent_id == "a" and result.instance_id == harness.instance_id
    assert type(seen[0]) is TaskContext
    # a handler gets no Redis client and no settings object: only the context's methods
    assert not any(hasattr(seen[0], name) for name in ("redis", "settings", "keys"))
    assert seen[0].max_output_bytes == Settings().max_payload_bytes


async def test_apply_once_counts_each_task_once() -> None:
    agent = _agent()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        first = await ctx.apply_once("pay", amount=5)
        second = await ctx.apply_once("pay", amount=5)
        return {"first": first, "second": second}

    harness = AgentHarness(agent)
    one = await harness.run({})
    assert one.output == {"first": True, "second": False}
    rerun = await harness.run({}, task_id=one.task_id)
    assert rerun.output == {"first": False, "second": False}
    await harness.run({})
    assert harness.effects["pay"] == 10


async def test_a_revoked_lease_fences_and_answers_nothing() -> None:
    agent = _agent()
    fenced: list[StaleFencingToken] = []

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        try:
            await ctx.fence()
        except StaleFencingToken as exc:
            fenced.append(exc)
        await ctx.apply_once("pay")
        return {}

    harness = AgentHarness(agent)
    harness.revoke_lease()
    with pytest.raises(StaleFencingToken):
        await harness.run({})
    assert len(fenced) == 1 and harness.effects["pay"] == 0
    harness.restore_lease()
    assert (await harness.run({})).status == "completed" and harness.effects["pay"] == 1


async def test_context_and_handoffs_to_stub_agents() -> None:
    agent = _agent("front")
    billing = Agent("billing", "bills")

    @billing.handler
    async def bill(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        shared = await ctx.context()
        await ctx.apply_once("charge")
        return {"charged": task.payload["amount"], "customer": shared["customer"]}

    async def shipping(task: TaskEnvelope) -> dict[str, Any]:
        return {"eta": 2, "hops": task.hops}

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        assert await ctx.context() == {}
        await ctx.save_context({"customer": "c-1"})
        charged = await ctx.handoff("charge the card", {"amount": 3}, target="billing")
        shipped = await ctx.handoff("shipping")
        lost = await ctx.handoff("nobody does this")
        return {
            "charged": charged.output,
            "shipped": shipped.output,
            "lost": [lost.status, lost.error.code if lost.error else None],
            "by": charged.agent_id,
        }

    harness = AgentHarness(agent, stubs={"billing": billing, "shipping": shipping})
    result = await harness.run({}, timeout_ms=10_000)
    assert result.status == "completed", result
    assert result.output == {
        "charged": {"charged": 3, "customer": "c-1"},
        "shipped": {"eta": 2, "hops": 1},
        "lost": ["unroutable", "no_agent"],
        "by": "billing",
    }
    child = harness.handoffs[0]
    assert child.trace_id == harness.runs[0].trace_id and child.parent_task_id == result.task_id
    assert child.trajectory == ["front"] and child.timeout_ms <= 5_000
    assert harness.effects["charge"] == 1 and len(harness.contexts) == 1


async def test_a_missing_context_raises_context_not_found() -> None:
    agent = _agent()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        try:
            await ctx.context()
        except ContextNotFound:
            return {"missing": True}
        return {"missing": False}

    harness = AgentHarness(agent)
    missing = await harness.run({}, trace_id="t-1", context_ref="ctx:t-1:9")
    assert missing.output == {"missing": True}
    ref = harness.save_context("t-1", {"k": "v"})
    assert (await harness.run({}, trace_id="t-1", context_ref=ref)).output == {"missing": False}


async def test_the_deadline_cancels_the_handler() -> None:
    agent = _agent()
    cancelled = asyncio.Event()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {}

    harness = AgentHarness(agent)
    result = await harness.run({}, timeout_ms=150)
    assert result.status == "expired" and result.error is not None
    assert result.error.code == "deadline_passed" and cancelled.is_set()
    late = await harness.run({}, timeout_ms=150, deadline_ms=1)
    assert late.error is not None and late.error.code == "expired_in_queue"
    short = AgentHarness(agent, settings=Settings(max_task_lifetime_s=0.1))
    capped = await short.run({}, timeout_ms=10_000)
    assert capped.status == "failed" and capped.error is not None
    assert capped.error.code == "lifetime_exceeded"


async def test_retries_rejects_failures_and_bad_outputs() -> None:
    agent = _agent()

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        kind = task.payload["kind"]
        if kind == "retry_once" and task.attempt == 0:
            raise Retry("not yet", delay_ms=1)
        if kind == "flaky":
            raise ConnectionError("backend down")
        if kind == "reject":
            raise Reject("not mine")
        if kind == "bug":
            raise KeyError("oops")
        if kind == "bad":
            return {"s": {1, 2}}
        return {"attempt": task.attempt}

    harness = AgentHarness(agent, settings=Settings(max_retries=2))
    assert (await harness.run({"kind": "retry_once"})).output == {"attempt": 1}
    flaky = await harness.run({"kind": "flaky"})
    assert flaky.status == "failed" and flaky.error is not None
    assert flaky.error.code == "retries_exhausted" and flaky.error.details["attempts"] == 3
    rejected = await harness.run({"kind": "reject"})
    assert rejected.status == "rejected" and rejected.error is not None
    assert rejected.error.message == "not mine"
    bug = await harness.run({"kind": "bug"})
    assert bug.error is not None and bug.error.code == "handler_error"
    bad = await harness.run({"kind": "bad"})
    assert bad.error is not None and bad.error.code == "bad_handler_output"
    assert bad.error.details == {"key": "output.s", "type": "set"}


class Recorder(WorkerMiddleware):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        outcome = await call_next(run)
        self.seen.append((run.task_id, outcome.kind))
        return outcome


class Broken(WorkerMiddleware):
    def __init__(self, after: bool) -> None:
        self.after = after

    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        if not self.after:
            raise RuntimeError("hook bug before")
        await call_next(run)
        raise RuntimeError("hook bug after")


class Gate(WorkerMiddleware):
    async def around_task(self, run: TaskRun, call_next: CallNext) -> Outcome:
        if run.envelope.payload.get("closed"):
            raise Reject("gate closed")
        return await call_next(run)


async def test_middleware_wraps_every_task_and_a_broken_hook_is_skipped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    agent = _agent()
    calls: list[int] = []

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        calls.append(1)
        return {"ok": True}

    recorder = Recorder()
    harness = AgentHarness(
        agent, middleware=[recorder, Broken(after=False), Broken(after=True), Gate()]
    )
    result = await harness.run({})
    assert result.status == "completed" and result.output == {"ok": True}
    assert recorder.seen == [(result.task_id, "completed")] and calls == [1]
    critical = [r for r in caplog.records if r.levelname == "CRITICAL"]
    assert len(critical) == 2 and all("Broken" in r.getMessage() for r in critical)
    gated = await harness.run({"closed": True})
    assert gated.status == "rejected" and calls == [1]


async def test_a_task_reads_only_its_own_traces_context() -> None:
    agent = Agent("ctx.reader", "reads the shared context")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        return {"seen": await ctx.context()}

    harness = AgentHarness(agent)
    ref = harness.save_context("trace-a", {"secret": 1})
    own = await harness.run(trace_id="trace-a", context_ref=ref)
    assert own.status == "completed" and own.output == {"seen": {"secret": 1}}
    other = await harness.run(trace_id="trace-b", context_ref=ref)
    assert other.status == "failed" and other.error is not None
    assert "is another trace's" in other.error.message


def test_a_handler_logs_with_its_task_and_trace(caplog: pytest.LogCaptureFixture) -> None:
    """`ctx.logger` (made on first use) names the agent and carries the task's ids."""
    agent = _agent("logs.here")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        assert ctx.logger is ctx.logger  # one adapter per task
        ctx.logger.warning("working on it")
        return {}

    with caplog.at_level("WARNING", logger="mesh.agent.logs.here"):
        result = AgentHarness(agent).run_sync({})
    (record,) = [r for r in caplog.records if r.getMessage() == "working on it"]
    assert record.name == "mesh.agent.logs.here"
    assert record.__dict__["task_id"] == result.task_id
    assert record.__dict__["trace_id"] == result.trace_id
