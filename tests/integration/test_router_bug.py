"""A bug in the router neither stops it nor leaves a caller waiting in silence.

The router queue's settle policy (`mesh.router.settle.RouterSettler`) answers the body's
caller with ``router_error``, dead-letters the body as ``unroutable`` with "router internal
error", acks it, and the router goes on routing the next task.
"""

from __future__ import annotations

from typing import Any

import pytest

from mesh import MeshClient
from mesh.connection import MeshConnection
from mesh.dispatch.dead_letters import peek
from mesh.schemas import TaskEnvelope
from tests.agents_for_tests import effect_agent
from tests.conftest import wait_until
from tests.integration.dispatch_kit import OrderedSelector, start_router, start_worker

pytestmark = pytest.mark.integration


class BuggySelector(OrderedSelector):
    """Fails with a bug on every task whose capability says so; chooses normally else."""

    async def select(self, envelope: TaskEnvelope) -> Any:
        if envelope.capability == "crash the router":
            raise ZeroDivisionError("a bug in a selector")
        return await super().select(envelope)


async def test_a_router_bug_answers_the_caller_dead_letters_the_body_and_routing_goes_on(
    conn: MeshConnection, add_cleanup: Any
) -> None:
    router = await start_router(conn, add_cleanup, BuggySelector("effect"))
    await start_worker(conn, add_cleanup, effect_agent(conn))
    async with MeshClient(conn) as client:
        broken = await client.request("crash the router", {"n": 1}, wait_s=20)
        assert broken.status == "failed"
        assert broken.error is not None and broken.error.code == "router_error"

        await wait_until(lambda: peek(conn, "unroutable"), timeout=10)
        [letter] = await peek(conn, "unroutable")
        assert letter.details["error"] == "router internal error"
        assert letter.as_dict()["body"]["payload"] == {"n": 1}

        # the router goes on: the next task is routed and completed
        fine = await client.request("do", {"n": 2}, wait_s=20)
        assert fine.status == "completed"
    assert router.handled >= 1
    assert router.deps is not None
