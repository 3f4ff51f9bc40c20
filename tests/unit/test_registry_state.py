"""The registry read model, events and the `mesh agents` table (pure logic)."""

from __future__ import annotations

from mesh.cli.agents import render_table, rows
from mesh.registry.events import (
    down_event,
    instance_from_up,
    lease_rows,
    leases_event,
    up_event,
)
from mesh.registry.state import AgentState, InstanceState
from mesh.schemas import Event, Registration, decode, encode


def inst(
    iid: str,
    *,
    status: str = "up",
    expires: int = 2_000,
    in_flight: int = 0,
    max_conc: int = 4,
    token: int = 1,
) -> InstanceState:
    return InstanceState(
        iid,
        "a",
        token,
        status,
        expires,
        last_heartbeat_ms=500,
        in_flight=in_flight,
        max_concurrency=max_conc,
    )


def test_liveness_is_decided_at_read_time() -> None:
    i = inst("i1", expires=2_000)
    assert i.is_live(2_000) and not i.is_live(2_001)
    assert not inst("i2", status="down", expires=9_999).is_live(1_000)
    assert i.display_status(1_000) == "idle"
    assert inst("i3", in_flight=1).display_status(1_000) == "busy"
    assert i.display_status(3_000) == "down"


def test_agent_load_sums_live_instances_only() -> None:
    agent = AgentState(
        "a",
        None,
        {
            "i1": inst("i1", in_flight=2, max_conc=4, token=1),
            "i2": inst("i2", in_flight=3, max_conc=6, token=2),
            "i3": inst("i3", in_flight=7, max_conc=8, token=3, status="down"),
            "i4": inst("i4", in_flight=9, max_conc=8, token=4, expires=500),
        },
    )
    assert agent.load(1_000) == 5 and agent.capacity(1_000) == 10
    assert agent.tokens(1_000) == {"i1": 1, "i2": 2}
    assert agent.load_ratio(1_000) == 0.5
    assert agent.is_live(1_000) and not agent.is_live(5_000)
    assert AgentState("empty").load_ratio(0) == 1.0


def test_from_hash_reads_bytes_and_refuses_incomplete() -> None:
    raw = {
        b"instance_id": b"i",
        b"agent_id": b"a",
        b"token": b"3",
        b"status": b"up",
        b"lease_expires_ms": b"10",
        b"in_flight": b"1",
    }
    parsed = InstanceState.from_hash(raw)
    assert parsed is not None and parsed.token == 3 and parsed.in_flight == 1
    assert InstanceState.from_hash({b"agent_id": b"a"}) is None


def test_events_round_trip() -> None:
    reg = Registration(agent_id="a", instance_id="i", capability_text="does a", version="7")
    up = decode(Event, encode(up_event(reg, 5, 1_000, 16_000)))
    got_reg, got = instance_from_up(up)
    assert got_reg == reg
    assert (got.token, got.lease_expires_ms, got.registered_ms, got.version) == (
        5,
        16_000,
        1_000,
        "7",
    )
    down = down_event("a", "i", 5, "deregistered", lease_expires_ms=16_000, last_heartbeat_ms=1_000)
    assert down.type == "agent.down" and down.data["reason"] == "deregistered"
    rows_in = [("i", "a", 5, 20_000, 1, 4)]
    assert lease_rows(decode(Event, encode(leases_event(rows_in)))) == rows_in


def test_agents_table() -> None:
    agents = {
        "a": AgentState("a", None, {"i1": inst("i1", in_flight=1), "i2": inst("i2", status="down")})
    }
    table = rows(agents, 1_000)
    assert [r["status"] for r in table] == ["busy", "down"]
    assert table[0]["heartbeat_age_s"] == 0.5 and table[0]["agent_load"] == 1
    assert rows(agents, 1_000, live_only=True)[0]["instance_id"] == "i1"
    text = render_table(table)
    assert text.splitlines()[0].split()[:3] == ["AGENT", "INSTANCE", "STATUS"]
    assert "1/4" in text
    assert render_table([]) == "no agents registered"


def test_an_agent_whose_last_lease_ended_within_the_window_is_awaited() -> None:
    reg = Registration(agent_id="a", instance_id="i1", capability_text="x")
    # deregistered at 1_500, before its lease's end: the lease ended then
    gone = InstanceState("i1", "a", 1, "down", 2_000, down_ms=1_500)
    lapsed = InstanceState("i2", "a", 1, "up", 1_200)  # lapsed, no agent.down yet
    agent = AgentState("a", reg, {"i1": gone, "i2": lapsed})
    assert gone.lease_ended_ms == 1_500 and lapsed.lease_ended_ms == 1_200
    assert agent.last_live_ms(3_000) == 1_500
    assert agent.awaited(3_000, window_ms=1_500)
    assert not agent.awaited(3_001, window_ms=1_500)  # gone longer than the window
    assert not agent.awaited(3_000, window_ms=0)  # the window off
    live = AgentState("a", reg, {"i3": inst("i3", expires=5_000)})
    assert live.last_live_ms(3_000) == 3_000 and not live.awaited(3_000, window_ms=1_500)
    assert AgentState("a", reg).last_live_ms(3_000) is None  # no instance known
    assert not AgentState("a", None, {"i1": gone}).awaited(1_600, window_ms=1_500)


def test_down_ms_is_read_from_the_instance_hash() -> None:
    raw = {
        b"instance_id": b"i1",
        b"agent_id": b"a",
        b"token": b"3",
        b"status": b"down",
        b"lease_expires_ms": b"9000",
        b"down_ms": b"7000",
    }
    parsed = InstanceState.from_hash(raw)
    assert parsed is not None and parsed.down_ms == 7_000 and parsed.lease_ended_ms == 7_000
