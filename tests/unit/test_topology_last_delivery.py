"""`Topology.last_delivery`: a quorum queue's own ``x-delivery-count`` on a redelivery says
when the broker would drop the message next (the router ends it instead)."""

from __future__ import annotations

from mesh.config import Settings
from mesh.topology import Topology


def topology(queue_type: str) -> Topology:
    return Topology.from_settings(Settings(namespace="t", queue_type=queue_type, delivery_limit=3))


def test_the_delivery_at_the_limit_is_the_last() -> None:
    quorum = topology("quorum")
    assert quorum.last_delivery(True, {"x-delivery-count": 3})
    assert quorum.last_delivery(True, {"x-delivery-count": 4})
    assert not quorum.last_delivery(True, {"x-delivery-count": 2})


def test_a_first_delivery_is_never_the_last_whatever_it_carries() -> None:
    # another queue's count, dead-lettered with the message, or a sender's own header
    assert not topology("quorum").last_delivery(False, {"x-delivery-count": 9})


def test_classic_queues_and_odd_headers_have_no_last_delivery() -> None:
    assert not topology("classic").last_delivery(True, {"x-delivery-count": 9})
    assert not topology("quorum").last_delivery(True, {})
    assert not topology("quorum").last_delivery(True, None)
    assert not topology("quorum").last_delivery(True, {"x-delivery-count": "9"})
