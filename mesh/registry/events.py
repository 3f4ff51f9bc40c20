"""``agent.*`` events: what the registry publishes and what snapshots apply.

- ``agent.up``: one instance registered. ``data``: ``token``, ``lease_expires_ms``,
  ``registered_ms`` and the whole ``registration``, so a snapshot needs no Redis read.
- ``agent.down``: one instance is down. ``data``: ``token``, ``reason``
  (``lease_expired`` | ``deregistered``), ``lease_expires_ms``, ``last_heartbeat_ms``.
- ``agent.leases``: renewals batched over a fraction of the heartbeat interval (one event
  per registry per flush, not one per heartbeat). ``data.instances``: a list of
  ``[instance_id, agent_id, token, lease_expires_ms, in_flight, max_concurrency]``.
  Snapshots use it to keep leases and loads fresh between resyncs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from mesh.registry.state import InstanceState
from mesh.schemas import Event, Registration

AGENT_UP = "agent.up"
AGENT_DOWN = "agent.down"
AGENT_LEASES = "agent.leases"
#: binding key of a snapshot queue
AGENT_EVENTS = "agent.*"

DownReason = Literal["lease_expired", "deregistered"]
LeaseRow = tuple[str, str, int, int, int, int]


def up_event(registration: Registration, token: int, now_ms: int, lease_expires_ms: int) -> Event:
    return Event(
        type=AGENT_UP,
        agent_id=registration.agent_id,
        instance_id=registration.instance_id,
        data={
            "token": token,
            "registered_ms": now_ms,
            "lease_expires_ms": lease_expires_ms,
            "registration": registration.model_dump(mode="json"),
        },
    )


def down_event(
    agent_id: str,
    instance_id: str,
    token: int,
    reason: DownReason,
    *,
    lease_expires_ms: int,
    last_heartbeat_ms: int,
) -> Event:
    return Event(
        type=AGENT_DOWN,
        agent_id=agent_id,
        instance_id=instance_id,
        data={
            "token": token,
            "reason": reason,
            "lease_expires_ms": lease_expires_ms,
            "last_heartbeat_ms": last_heartbeat_ms,
        },
    )


def leases_event(rows: Iterable[LeaseRow]) -> Event:
    return Event(type=AGENT_LEASES, data={"instances": [list(r) for r in rows]})


def instance_from_up(event: Event) -> tuple[Registration, InstanceState]:
    """The registration and instance an ``agent.up`` event announces."""
    data = event.data
    registration = Registration.model_validate(data["registration"])
    inst = InstanceState(
        instance_id=registration.instance_id,
        agent_id=registration.agent_id,
        token=int(data["token"]),
        status="up",
        lease_expires_ms=int(data["lease_expires_ms"]),
        last_heartbeat_ms=int(data["registered_ms"]),
        registered_ms=int(data["registered_ms"]),
        max_concurrency=registration.max_concurrency,
        version=registration.version,
    )
    return registration, inst


def lease_rows(event: Event) -> list[LeaseRow]:
    """The renewals an ``agent.leases`` event carries."""
    rows: list[LeaseRow] = []
    for r in event.data.get("instances", []):
        rows.append((str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]), int(r[5])))
    return rows
