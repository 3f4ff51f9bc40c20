"""`AgentHarness`: run an `Agent`'s handler in memory, without RabbitMQ or Redis.

The handler gets the real `TaskContext` over in-memory stand-ins, and its outcome goes
through the worker's own deadline step and outcome mapping, so what a test sees is what
the mesh would answer::

    harness = AgentHarness(refunds, stubs={"billing": {"paid": True}})
    result = await harness.run({"order_id": "42"})
    assert result.status == "completed" and harness.effects["refund"] == 1

`run_sync` does the same from synchronous code (a plain pytest test, no plugin).

- ``ctx.apply_once(name)`` applies at most once per task_id; `effects` holds the totals.
- ``ctx.fence()`` and ``apply_once`` raise `StaleFencingToken` after `revoke_lease()`;
  `run` then raises it too (a real worker would hand the task back unanswered).
- ``ctx.context()`` / ``ctx.save_context()`` keep versions in `contexts`.
- ``ctx.handoff(...)`` runs the stub named by the target (else the capability): an `Agent`
  (its handler runs with its own context), an async function of the task, or a dict to
  answer with. Every child envelope is kept in `handoffs`. No stub: an ``unroutable`` Result.
- The handler is cancelled at the task's deadline (``timeout_ms``): ``expired``.
- `Retry` and transient errors run the task again at once with ``attempt + 1``, at most
  ``settings.max_retries`` times, then ``failed retries_exhausted``; `Reject` answers
  ``rejected`` (the mesh would try the next candidate).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from mesh.access.roles import vhost_of
from mesh.config import Settings
from mesh.dispatch.context import make_ref, parse_ref
from mesh.dispatch.store import Holder
from mesh.errors import ContextNotFound, StaleFencingToken
from mesh.keys import Keys
from mesh.results import error_result
from mesh.schemas import Result, TaskEnvelope, encode, now_ms
from mesh.worker.agent import Agent
from mesh.worker.context import TaskContext
from mesh.worker.deps import HandoffClient, TaskDeps
from mesh.worker.middleware import (
    ContractMiddleware,
    DeadlineMiddleware,
    TaskRun,
    WorkerMiddleware,
    chain,
    handler_step,
)
from mesh.worker.outcome import Outcome, terminal_result, unstorable_result

#: what a stub agent may be: an agent, an async function of the task, or a fixed output
Stub = Agent | Callable[[TaskEnvelope], Awaitable[dict[str, Any]]] | Mapping[str, Any]


class _Lease:
    """The harness's fencing token: `revoke` makes the current one stale."""

    def __init__(self, agent_id: str, token: int = 1) -> None:
        self.agent_id = agent_id
        self.token = token
        self.revoked = False

    async def check(self, token: int) -> None:
        if self.revoked or token != self.token:
            current = None if self.revoked else self.token
            raise StaleFencingToken(self.agent_id, token, current)


class _Effects:
    """Side-effect counters, applied once per (task_id, name), refused on a stale lease."""

    def __init__(self, lease: _Lease, totals: Counter[str], applied: set[tuple[str, str]]) -> None:
        self.lease = lease
        self.totals = totals
        self.applied = applied

    async def apply_once(self, task_id: str, holder: Holder, name: str, amount: int = 1) -> int:
        if self.lease.revoked or holder.token != self.lease.token:
            return -1
        if (task_id, name) in self.applied:
            return 0
        self.applied.add((task_id, name))
        self.totals[name] += amount
        return 1


class _Contexts:
    """Versioned shared context per trace, in a dict keyed by context_ref."""

    def __init__(self) -> None:
        self.saved: dict[str, dict[str, Any]] = {}
        self._versions: Counter[str] = Counter()

    async def load(self, ref: str) -> dict[str, Any]:
        parse_ref(ref)
        if ref not in self.saved:
            raise ContextNotFound(f"no context stored under {ref!r} in this harness")
        return dict(self.saved[ref])

    async def save(self, trace_id: str, data: dict[str, Any]) -> str:
        self._versions[trace_id] += 1
        ref = make_ref(trace_id, self._versions[trace_id])
        self.saved[ref] = dict(data)
        return ref


class _StubRouter:
    """The harness's stand-in for `MeshClient.send`: hands a child task to a stub."""

    def __init__(self, harness: AgentHarness) -> None:
        self.harness = harness

    async def send(self, envelope: TaskEnvelope, *, wait_s: float | None = None) -> Result:
        harness = self.harness
        harness.handoffs.append(envelope)
        name = envelope.target or envelope.capability
        agent = harness.stub_agents.get(name)
        if agent is None:
            return error_result(
                envelope,
                "unroutable",
                "no_agent",
                f"no stub agent {name!r} in this harness; pass stubs={{{name!r}: ...}}",
                {"stubs": sorted(harness.stub_agents)},
            )
        return await harness.run_envelope(envelope, agent=agent)


def _stub_agent(name: str, stub: Stub) -> Agent:
    if isinstance(stub, Agent):
        return stub
    agent = Agent(name, f"stub {name}")
    if isinstance(stub, Mapping):
        output = dict(stub)

        async def answer(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
            return dict(output)

        agent.handler(answer)
    else:
        fn = stub

        async def call(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
            return await fn(task)

        agent.handler(call)
    return agent


class AgentHarness:
    """Runs `agent`'s handler like a worker would, all in memory (see the module doc)."""

    def __init__(
        self,
        agent: Agent,
        *,
        stubs: Mapping[str, Stub] | None = None,
        settings: Settings | None = None,
        middleware: Sequence[WorkerMiddleware] = (),
        instance_id: str | None = None,
    ) -> None:
        self.agent = agent
        self.settings = settings or Settings()
        self.instance_id = instance_id or f"{agent.agent_id}-harness"
        self.middleware = [DeadlineMiddleware(), *ContractMiddleware.of(agent), *middleware]
        self.stub_agents = {name: _stub_agent(name, stub) for name, stub in (stubs or {}).items()}
        self._lease = _Lease(agent.agent_id)
        self._effects = _Effects(self._lease, Counter(), set())
        #: stubs hold leases of their own: revoking the agent's leaves them alone
        self._stub_effects = _Effects(_Lease("stubs"), self._effects.totals, self._effects.applied)
        self._contexts = _Contexts()
        self._router = _StubRouter(self)
        #: every child task a handler handed off, in order
        self.handoffs: list[TaskEnvelope] = []
        #: every envelope a handler ran with (retries included), in order
        self.runs: list[TaskEnvelope] = []
        self._ids = itertools.count(1)

    @property
    def effects(self) -> Counter[str]:
        """Totals of ``ctx.apply_once`` per name (each task counted once)."""
        return self._effects.totals

    @property
    def contexts(self) -> dict[str, dict[str, Any]]:
        """Saved shared contexts by context_ref."""
        return self._contexts.saved

    def revoke_lease(self) -> None:
        """Make the instance's fencing token stale (a lease lost to a partition or pause)."""
        self._lease.revoked = True

    def restore_lease(self) -> None:
        """A fresh lease with a new, greater token (the instance registered again)."""
        self._lease.revoked = False
        self._lease.token += 1

    def save_context(self, trace_id: str, data: dict[str, Any]) -> str:
        """Store a context a test task can carry (``context_ref=``); returns its ref."""
        self._contexts._versions[trace_id] += 1
        ref = make_ref(trace_id, self._contexts._versions[trace_id])
        self._contexts.saved[ref] = dict(data)
        return ref

    async def run(
        self, payload: dict[str, Any] | None = None, *, capability: str = "test", **fields: Any
    ) -> Result:
        """Run one task (any other envelope field in `fields`) and return its Result.

        Raises:
            StaleFencingToken: the lease was revoked; the mesh would send no Result.
        """
        envelope = TaskEnvelope(capability=capability, payload=payload or {}, **fields)
        return await self.run_envelope(envelope)

    def run_sync(
        self, payload: dict[str, Any] | None = None, *, capability: str = "test", **fields: Any
    ) -> Result:
        """`run` from synchronous code (a plain pytest test, no plugin): one event loop per
        call, so the harness's state (`effects`, `handoffs`, `contexts`) carries over.

        Raises:
            RuntimeError: called while an event loop runs (``await harness.run(...)`` there).
            StaleFencingToken: the lease was revoked; the mesh would send no Result.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.run(payload, capability=capability, **fields))
        raise RuntimeError("run_sync() inside a running event loop: use `await harness.run()`")

    async def run_envelope(self, envelope: TaskEnvelope, *, agent: Agent | None = None) -> Result:
        """Run a ready envelope through `agent` (default: the harness's agent).

        Like a router, it sets ``deadline_ms`` from ``timeout_ms`` when the task has none.
        """
        agent = agent or self.agent
        handler = handler_step(agent.require_handler(), expose_errors=agent.expose_errors)
        deps = self._deps(agent)
        if envelope.deadline_ms is None:
            envelope = envelope.model_copy(update={"deadline_ms": now_ms() + envelope.timeout_ms})
        while True:
            holder = Holder(deps.instance_id, self._lease_of(deps).token, fenced=True)
            self.runs.append(envelope)
            run = TaskRun(
                envelope,
                TaskContext(deps, envelope, holder),
                int(self.settings.max_task_lifetime_s * 1000),
            )
            outcome = await chain(self.middleware, handler)(run)
            if outcome.kind == "retry" and envelope.attempt < self.settings.max_retries:
                envelope = envelope.model_copy(update={"attempt": envelope.attempt + 1})
                continue
            return self._finish(deps, envelope, outcome, holder)

    def _finish(
        self, deps: TaskDeps, envelope: TaskEnvelope, outcome: Outcome, holder: Holder
    ) -> Result:
        lease = self._lease_of(deps)
        # the commit is fenced, as in the worker: a stale instance answers nothing
        if lease.revoked or holder.token != lease.token:
            raise StaleFencingToken(deps.agent_id, holder.token, None)
        ids = {"agent_id": deps.agent_id, "instance_id": deps.instance_id}
        result = terminal_result(envelope, outcome, {}, **ids)
        try:
            encode(result)
        except (TypeError, ValueError) as exc:
            result = unstorable_result(envelope, exc, {}, **ids)
        return result

    def _lease_of(self, deps: TaskDeps) -> _Lease:
        effects = deps.effects
        return effects.lease if isinstance(effects, _Effects) else self._lease

    def _deps(self, agent: Agent) -> TaskDeps:
        own = agent is self.agent
        effects = self._effects if own else self._stub_effects
        return TaskDeps(
            agent_id=agent.agent_id,
            instance_id=self.instance_id if own else f"{agent.agent_id}-stub",
            settings=self.settings,
            keys=Keys(self.settings.namespace, vhost_of(self.settings)),
            effects=effects,
            contexts=self._contexts,
            fence=effects.lease,
            client=self._client,
        )

    async def _client(self) -> HandoffClient:
        return self._router


__all__ = ["AgentHarness", "Stub"]
