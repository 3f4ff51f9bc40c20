"""An agent whose lease looked lapsed when the router first synced it is indexed once a
renewal makes it live (renewals fire no registry hook)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from mesh.registry.state import AgentState, InstanceState
from mesh.router.keeper import IndexKeeper
from mesh.schemas import now_ms


def _keeper(agents: list[AgentState], indexed: set[str]) -> IndexKeeper:
    keeper = IndexKeeper.__new__(IndexKeeper)
    keeper.snapshot = SimpleNamespace(all_agents=lambda: agents)  # type: ignore[assignment]
    keeper.index = indexed  # type: ignore[assignment]
    keeper._dirty_agents = set()
    keeper._wake = asyncio.Event()
    return keeper


def _agent(agent_id: str, lease_left_ms: int) -> AgentState:
    instance = InstanceState("i1", agent_id, 1, "up", now_ms() + lease_left_ms)
    return AgentState(agent_id, instances={"i1": instance})


def test_a_live_agent_missing_from_the_index_is_synced_again() -> None:
    agents = [_agent("late", 5_000), _agent("indexed", 5_000), _agent("lapsed", -5_000)]
    keeper = _keeper(agents, {"indexed"})
    keeper._index_returned()
    assert keeper._dirty_agents == {"late"} and keeper._wake.is_set()


def test_nothing_to_do_wakes_nobody() -> None:
    keeper = _keeper([_agent("indexed", 5_000), _agent("lapsed", -5_000)], {"indexed"})
    keeper._index_returned()
    assert keeper._dirty_agents == set() and not keeper._wake.is_set()
