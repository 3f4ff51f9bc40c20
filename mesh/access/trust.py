"""`EventTrust`: which events a snapshot or a router believes, by the broker's ``user_id``.

Under access control (``MESH_ACCESS_CONTROL``) events are believed only from the role that
is entitled to them, however the topic permissions were set:

- ``agent.*`` (up, down, leases): from a registry;
- ``task.*`` outcomes: from a router, or from the worker user of the very agent the event
  names (a worker of agent B cannot open A's breaker with forged ``task.failed`` events);
- ``route.*`` (what routers tell each other: learned texts, fitted heads, decisions,
  feedback): from a router only. A ``route.learned`` carries texts for any number of
  agents: no worker may teach the routers, not even about its own agent (a client's
  feedback goes to a router over AMQP, which checks the client owns the task and emits
  ``route.feedback`` itself). A router then believes a ``route.learned`` item by item
  (`IndexKeeper._vouched`): only where the routing record of the item's task, which only
  routers write, names the item's agent and text.

Without access control every event is believed, as before.
"""

from __future__ import annotations

from typing import Any

from mesh.access.roles import AccessScope
from mesh.schemas import Event


class EventTrust:
    def __init__(self, settings: Any) -> None:
        self.enabled = bool(settings.access_control)
        self.scope = AccessScope.from_settings(settings)
        self.ignored = 0

    def believes(self, user_id: str | None, event: Event) -> bool:
        """Whether `event`, published by `user_id`, counts; an ignored one is counted."""
        if not self.enabled:
            return True
        role = self.scope.role_of(user_id or "")
        kind = role.kind if role is not None else ""
        if event.type.startswith("agent."):
            ok = kind == "registry"
        elif event.type.startswith("route."):
            ok = kind == "router"  # what routers tell each other; feedback goes through one
        else:
            ok = kind == "router" or self.scope.is_worker_of(user_id, event.agent_id)
        if not ok:
            self.ignored += 1
        return ok


__all__ = ["EventTrust"]
