"""The topic retry exchange: a retry key names its delay queue and its agent."""

from __future__ import annotations

from mesh.topology import Topology


def test_a_retry_key_carries_the_delay_and_the_dispatch_key() -> None:
    classic = Topology(namespace="mesh")
    assert classic.retry_key(1000, "pay") == "1000.agent.pay.normal"
    assert classic.agent_of_routing_key("1000.agent.pay.normal") == "pay"
    assert classic.agent_of_routing_key("agent.pay.low") == "pay"
    assert classic.agent_of_routing_key("agent.pay") is None  # no band: not a dispatch key
    assert classic.agent_of_routing_key("dead.expired") is None
    quorum = Topology(namespace="mesh", queue_type="quorum")
    assert quorum.retry_key(5000, "a.b", 9) == "5000.agent.a.b.high"
    assert quorum.agent_of_routing_key("5000.agent.a.b.high") == "a.b"


def test_agent_queues_take_their_key_behind_any_delay() -> None:
    for mode in ("classic", "quorum"):
        spec = Topology(namespace="mesh", queue_type=mode).agent_spec("pay")
        keys = {b.routing_key for b in spec.bindings if b.exchange == "mesh.capabilities"}
        bands = ("high", "normal", "low")
        assert keys == {f"{p}agent.pay.{b}" for p in ("", "*.") for b in bands}
    static = Topology(namespace="mesh", retry_delays_ms=(1000,)).static_spec()
    retry = [b for b in static.bindings if b.exchange == "mesh.retries"]
    assert [(b.queue, b.routing_key) for b in retry] == [("mesh.retry.1000", "1000.#")]
