"""`EventTrust`: under access control an event counts only from the role entitled to it."""

from __future__ import annotations

from mesh.access.trust import EventTrust
from mesh.config import Settings
from mesh.schemas import Event


def _trust() -> EventTrust:
    return EventTrust(Settings(namespace="mesh", access_control=True))


def test_agent_events_only_from_a_registry() -> None:
    trust = _trust()
    down = Event(type="agent.down", agent_id="pay", data={})
    assert trust.believes("mesh:registry", down)
    assert not trust.believes("mesh:worker.pay", down)
    assert not trust.believes("mesh:router", down)
    assert not trust.believes(None, down)
    assert trust.ignored == 3


def test_outcomes_only_from_a_router_or_the_agents_own_worker() -> None:
    trust = _trust()
    failed = Event(type="task.failed", agent_id="pay", task_id="t1", data={})
    assert trust.believes("mesh:router", failed)
    assert trust.believes("mesh:worker.pay", failed)
    assert not trust.believes("mesh:worker.refunds", failed)  # B cannot open A's breaker
    assert not trust.believes("mesh:client.web", failed)
    feedback = Event(type="route.feedback", agent_id="pay", task_id="t1", data={})
    assert trust.believes("mesh:router", feedback)
    assert not trust.believes("mesh:client.web", feedback)  # it goes through a router


def test_what_routers_tell_each_other_counts_only_from_a_router() -> None:
    trust = _trust()
    for kind in ("route.learned", "route.fitted", "route.decision"):
        # a worker's own agent named on the event: still not one of the routers
        told = Event(type=kind, agent_id="pay", data={"items": []})
        assert trust.believes("mesh:router", told)
        assert not trust.believes("mesh:worker.pay", told), kind
        assert not trust.believes("mesh:client.web", told)


def test_without_access_control_everything_counts() -> None:
    trust = EventTrust(Settings())
    assert trust.believes(None, Event(type="agent.down", agent_id="pay", data={}))
    assert trust.ignored == 0
