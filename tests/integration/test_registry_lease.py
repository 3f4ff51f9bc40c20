"""Lease scripts on the real Redis: each lapse is claimed exactly once, whoever sees it."""

from __future__ import annotations

import pytest

from mesh.connection import MeshConnection
from mesh.registry.lease import Beat, Grant, LeaseStore
from mesh.registry.state import load_instance, load_state
from mesh.schemas import Registration
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def reg(iid: str) -> Registration:
    return Registration(agent_id="lease", instance_id=iid, capability_text="leases")


async def redis_now(conn: MeshConnection) -> int:
    seconds, micros = await conn.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


async def test_late_heartbeat_claims_the_lapse_and_the_sweep_does_not(
    conn: MeshConnection,
) -> None:
    store = LeaseStore(conn.redis, conn.keys, lease_ttl_s=0.05)
    grant = await store.grant(reg("l-1"))
    beat = Beat("lease", "l-1", grant.token, 1, 4)
    assert [r.code for r in await store.renew([beat])] == ["renewed"]
    inst = await load_instance(conn.redis, conn.keys, "l-1")
    assert inst is not None
    await wait_until(lambda: _after(conn, inst.lease_expires_ms))
    first = await store.renew([beat])
    assert first[0].code == "lapsed"
    assert first[0].lease_expires_ms == inst.lease_expires_ms
    assert [r.code for r in await store.renew([beat])] == ["lost"]
    assert await store.sweep() == []
    down = await load_instance(conn.redis, conn.keys, "l-1")
    assert down is not None and down.status == "down" and down.down_reason == "lease_expired"
    assert await conn.redis.pttl(conn.keys.instance("l-1")) > 0  # forgotten later


async def _after(conn: MeshConnection, ms: int) -> bool:
    return await redis_now(conn) > ms


async def test_sweep_claims_once_and_regrant_revives_with_a_higher_token(
    conn: MeshConnection,
) -> None:
    store = LeaseStore(conn.redis, conn.keys, lease_ttl_s=0.05)
    grants = [await store.grant(reg(f"s-{n}")) for n in range(3)]
    await wait_until(lambda: _after(conn, max(g.lease_expires_ms for g in grants)))
    claimed = await store.sweep()
    assert sorted(c.instance_id for c in claimed) == ["s-0", "s-1", "s-2"]
    assert {c.token for c in claimed} == {g.token for g in grants}
    assert await store.sweep() == []
    again = await store.grant(reg("s-0"))
    assert again.token > max(g.token for g in grants)
    inst = await load_instance(conn.redis, conn.keys, "s-0")
    assert inst is not None and inst.status == "up" and inst.down_reason is None
    assert await conn.redis.pttl(conn.keys.instance("s-0")) == -1


async def test_the_sweep_says_how_soon_the_earliest_lease_lapses(conn: MeshConnection) -> None:
    store = LeaseStore(conn.redis, conn.keys, lease_ttl_s=5)
    assert await store.sweep() == [] and store.next_lapse_in_ms is None  # no lease
    first, second = await store.grant(reg("n-1")), await store.grant(reg("n-2"))
    assert isinstance(first, Grant) and isinstance(second, Grant)
    assert await store.sweep() == []
    # the earlier of the two leases, by Redis' clock: at most the TTL, and not much less
    assert store.next_lapse_in_ms is not None
    assert first.lease_expires_ms - await redis_now(conn) <= store.next_lapse_in_ms <= 5000
    assert store.next_lapse_in_ms > 4000
    await store.release("n-1", first.token)
    await store.release("n-2", second.token)
    assert await store.sweep() == [] and store.next_lapse_in_ms is None


async def test_release_needs_the_current_token(conn: MeshConnection) -> None:
    store = LeaseStore(conn.redis, conn.keys, lease_ttl_s=5)
    old = await store.grant(reg("r-1"))
    new = await store.grant(reg("r-1"))
    assert (await store.release("r-1", old.token))[0] is False
    assert (await store.release("r-1", new.token))[0] is True
    assert (await store.release("r-1", new.token))[0] is False
    assert [r.code for r in await store.renew([Beat("lease", "r-1", new.token, 0, 1)])] == ["lost"]


async def test_forgotten_instance_ids_are_pruned_from_their_agent(conn: MeshConnection) -> None:
    """A down instance's hash expires; the next full read drops its id from the agent's set
    (a restarting worker leaves a new id each time), and keeps every id that has a hash."""
    store = LeaseStore(conn.redis, conn.keys, lease_ttl_s=5)
    for iid in ("p-live", "p-gone"):
        await store.grant(reg(iid))
    members = conn.keys.agent_instances("lease")
    await conn.redis.delete(conn.keys.instance("p-gone"))  # what DOWN_RETENTION_MS does
    state = await load_state(conn.redis, conn.keys)
    assert set(state["lease"].instances) == {"p-live"}
    assert {m.decode() for m in await conn.redis.smembers(members)} == {"p-live"}
