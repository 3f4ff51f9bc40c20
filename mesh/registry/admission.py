"""Who may speak for an agent: the registry's check of the broker-validated ``user_id``.

Under access control (``MESH_ACCESS_CONTROL=true``) a registration, heartbeat or goodbye for
agent ``a`` is accepted only from the broker user of ``worker.a`` (named as `mesh access
provision` names it: `mesh.access.roles.AccessScope`) or from a user that
``MESH_AGENT_USERS`` maps to ``a``, and only for an instance id ``a-<suffix>`` with no dot
in the suffix (the worker's reply queue is named after it, and its grant matches it by
exact name: `mesh.access.patterns.reply_queue_regex`).
The broker guarantees ``user_id`` (it refuses a publish whose ``user_id`` is not the
connection's login), so a body field can never stand in for it. Without access control
everything is accepted, as on a development broker where every process is ``guest``.
"""

from __future__ import annotations

from mesh.access.refusal import Refusal
from mesh.access.roles import AccessScope
from mesh.config import Settings


class Admission:
    """The registry's rule for `settings` (cheap; one per registry)."""

    def __init__(self, settings: Settings) -> None:
        self.enabled = settings.access_control
        self.scope = AccessScope.from_settings(settings)
        self.agent_users = {user: set(agents) for user, agents in settings.agent_users.items()}

    def refusal(self, user_id: str | None, agent_id: str, instance_id: str) -> Refusal | None:
        """None when `user_id` may speak for `instance_id` of `agent_id`."""
        if not self.enabled:
            return None
        if not user_id:
            return Refusal("no_user_id", "the message carries no user_id (publish with user_id)")
        if agent_id not in self.agents_of(user_id):
            return Refusal(
                "not_your_agent", f"broker user {user_id!r} may not speak for agent {agent_id!r}"
            )
        if not instance_id.startswith(f"{agent_id}-") or "." in instance_id[len(agent_id) :]:
            return Refusal(
                "bad_instance_id",
                f"instance id {instance_id!r} of agent {agent_id!r} must be '{agent_id}-' "
                "and a suffix without dots",
            )
        return None

    def agents_of(self, user_id: str) -> set[str]:
        """The agents `user_id` may register: its own ``worker.<agent>`` role, and the map."""
        agents = set(self.agent_users.get(user_id, ()))
        role = self.scope.role_of(user_id)
        if role is not None and role.kind == "worker" and role.name:
            agents.add(role.name)
        return agents


__all__ = ["Admission", "Refusal"]
