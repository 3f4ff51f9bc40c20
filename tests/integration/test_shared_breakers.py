"""Breaker openings shared through Redis: another router's opening is seen within
`SHARED_TTL_S`, and a router that targets many agents reads one counter, not a key per
agent, while no breaker opens."""

from __future__ import annotations

from typing import Any

import pytest

from mesh.connection import MeshConnection
from mesh.router import breaker
from mesh.router.breaker import SharedBreakers
from mesh.schemas import now_ms
from tests.conftest import wait_until


class CountingRedis:
    """`redis` with its GETs counted by key."""

    def __init__(self, redis: Any) -> None:
        self.redis = redis
        self.gets: list[str] = []

    async def get(self, key: str) -> Any:
        self.gets.append(key)
        return await self.redis.get(key)

    def pipeline(self, transaction: bool = False) -> Any:
        return self.redis.pipeline(transaction=transaction)


async def test_an_opening_reaches_another_router_and_quiet_agents_cost_one_read(
    conn: MeshConnection, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(breaker, "SHARED_TTL_S", 0.0)  # the counter is read every time
    opener = SharedBreakers(conn.redis, conn.keys)
    counted = CountingRedis(conn.redis)
    reader = SharedBreakers(counted, conn.keys)
    agents = [f"agent-{i}" for i in range(20)]
    for agent_id in agents:
        assert await reader.open_until_ms(agent_id) == 0
    counted.gets.clear()
    for agent_id in agents:  # nothing opened since: the counter alone is read
        assert await reader.open_until_ms(agent_id) == 0
    assert counted.gets == [conn.keys.breakers_version()] * len(agents)

    opener.publish("agent-3", 30.0)
    until = await wait_until(lambda: reader.open_until_ms("agent-3"), timeout=5)
    assert until > now_ms() + 20_000
    assert await reader.open_until_ms("agent-4") == 0  # re-read after the counter moved
    assert counted.gets[-2:] == [conn.keys.breakers_version(), conn.keys.breaker("agent-4")]
