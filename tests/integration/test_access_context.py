"""Shared context under access control: a worker reads and saves contexts only in its
agent's view, and a router copies a task's context into the view of the agent it
dispatches the task to, when it is of the task's own trace. So a worker of agent B, with
its own credentials, can neither read nor write a context of agent A's, nor have a router
copy it one of a trace never dispatched to B, while A's handler reads what it saved and a
handoff child on B sees it."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import NoPermissionError

from mesh import Agent, MeshClient, TaskContext
from mesh.access.roles import Role
from mesh.dispatch.context import ContextRef, ContextStore, split_ref
from mesh.errors import ContextNotFound
from mesh.schemas import TaskEnvelope
from mesh.schemas.codec import dumps
from mesh.services import start_registry, start_worker
from tests.integration.access_kit import AGENT_A, AGENT_B, CLIENT, Provisioned, start_router_as

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BOB = "mobile"


def _saver() -> Agent:
    """Saves the card it is given, reads it back, and hands off to B when asked."""
    agent = Agent(AGENT_A, "Keeps the card in the trace's context", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        out: dict[str, Any] = {"before": await ctx.context()}
        out["ref"] = await ctx.save_context({"card": task.payload["card"]})
        out["mine"] = await ctx.context()
        if task.payload.get("handoff"):
            inner = await ctx.handoff("read the card", target=AGENT_B)
            out["inner"] = inner.output
        return out

    return agent


def _reader() -> Agent:
    agent = Agent(AGENT_B, "Reads the trace's context", max_concurrency=4)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        try:
            return {"ref": task.context_ref, "context": await ctx.context()}
        except ContextNotFound as exc:
            return {"ref": task.context_ref, "not_found": str(exc)}

    return agent


async def test_a_worker_reads_and_writes_only_the_contexts_of_tasks_sent_to_its_agent(
    mesh_access: Provisioned, as_user: Any, add_cleanup: Any
) -> None:
    add_cleanup(await start_registry(await as_user(Role("registry"))))
    await start_router_as(as_user, add_cleanup)
    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_A)), _saver(), grace_s=2))
    add_cleanup(await start_worker(await as_user(Role("worker", AGENT_B)), _reader(), grace_s=2))
    intruder = await as_user(Role("worker", AGENT_B))  # B's credentials, nothing else
    keys = intruder.keys
    operator = redis_asyncio.Redis.from_url(mesh_access.base_redis_url)
    add_cleanup(operator.aclose)

    async with (
        MeshClient(await as_user(Role("client", CLIENT))) as alice,
        MeshClient(await as_user(Role("client", BOB))) as bob,
    ):
        # legitimate: A reads what it saved, and its handoff child on B sees it
        shared = await alice.request("card", {"card": "4111", "handoff": 1}, target=AGENT_A)
        assert shared.status == "completed" and shared.output is not None
        out = shared.output
        assert out["before"] == {} and out["mine"] == {"card": "4111"}
        assert out["inner"] == {"ref": out["ref"], "context": {"card": "4111"}}
        one = split_ref(out["ref"])
        assert one == ContextRef(shared.trace_id or "", 1, AGENT_A)
        # a trace of A's that never went to B
        private = await alice.request("card", {"card": "5500"}, target=AGENT_A)
        assert private.status == "completed" and private.output is not None
        two = split_ref(private.output["ref"])
        assert private.output["mine"] == {"card": "5500"} and two.origin == AGENT_A

        # nothing in the mesh's keys: a version lives in the saver's view (and its copies)
        for ref in (one, two):
            assert await operator.exists(keys.context(ref.trace_id, 1)) == 0
            assert await operator.exists(keys.context_version(ref.trace_id)) == 0

        # B's worker, with its own credentials: no read, write or delete of A's versions,
        # nor of the mesh's context keys (which a worker's user could write before)
        a_view = keys.for_agent(AGENT_A)
        for ref in (one, two):
            for key in (
                a_view.context(ref.trace_id, ref.version, ref.origin),
                a_view.context_version(ref.trace_id),
                keys.context(ref.trace_id, ref.version),
                keys.context_version(ref.trace_id),
            ):
                with pytest.raises(NoPermissionError):
                    await intruder.redis.get(key)
                with pytest.raises(NoPermissionError):
                    await intruder.redis.set(key, dumps({"card": "forged"}))
                with pytest.raises(NoPermissionError):
                    await intruder.redis.delete(key)
        # through its own store: the trace sent to B reads, the other is not found
        b_store = ContextStore.of_worker(intruder.redis, keys, intruder.settings, AGENT_B)
        assert await b_store.load(out["ref"]) == {"card": "4111"}
        with pytest.raises(ContextNotFound):
            await b_store.load(private.output["ref"])
        # a save of B's on A's trace is B's own version, in B's view: A's stays as it was
        forged = await b_store.save(two.trace_id, {"card": "forged"})
        assert split_ref(forged) == ContextRef(two.trace_id, 1, AGENT_B)

        # bob has a task on his own trace carry A's private context to B: not copied
        laundered = TaskEnvelope(
            capability="card", target=AGENT_B, context_ref=private.output["ref"]
        )
        answer = await bob.send(laundered, wait_s=20)
        assert answer.status == "completed" and answer.output is not None
        assert "not_found" in answer.output
        b_view = keys.for_agent(AGENT_B)
        assert await intruder.redis.get(b_view.context(two.trace_id, 1, AGENT_A)) is None
        with pytest.raises(ContextNotFound):
            await b_store.load(private.output["ref"])

        # A's contexts are unchanged, and the next handoff still carries its own
        a_store = ContextStore.of_worker(
            (a := await as_user(Role("worker", AGENT_A))).redis, a.keys, a.settings, AGENT_A
        )
        assert await a_store.load(private.output["ref"]) == {"card": "5500"}
        assert await a_store.load(out["ref"]) == {"card": "4111"}
        again = await alice.request("card", {"card": "3700", "handoff": 1}, target=AGENT_A)
        assert again.output is not None
        assert again.output["inner"]["context"] == {"card": "3700"}
    assert alice.results_received == 3 and alice.forged_results == 0
