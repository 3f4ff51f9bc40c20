"""`IngressGuard`: what a router believes under access control (``MESH_ACCESS_CONTROL``).

The sender is the broker-validated ``user_id`` of the message, never a body field:

- a task from ingress needs one, of a user of this mesh (`AccessScope`); its Result may
  only go to a reply queue of that very user (``<ns>.reply.<user>.<id>``), so nobody can
  aim an answer (or another task's Result) at someone else;
- a client's task starts fresh: ``source`` is its user, and ``hops``, ``trajectory``,
  ``attempt``, ``reroutes``, ``excluded_agents`` and ``route`` are the mesh's to set
  (a worker's handoff keeps them: its agent is part of the mesh);
- a task_id and a trace_id belong to the client user who used them first: another
  user's task under them is refused (``task_id_in_use``), so nobody joins a trace to read
  its shared context or gets another caller's stored Result;
- a dispatch that comes back from an agent queue (dead-lettered by the broker, which
  keeps the publisher's ``user_id``) must have been published by a router, or by a worker
  of that agent (its retry): nobody else can end or reroute a task that way.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from mesh.access.patterns import reply_queue_regex
from mesh.access.refusal import Refusal
from mesh.access.roles import AccessScope
from mesh.schemas import TaskEnvelope
from mesh.topology import Topology, message_priority


class Guard(Protocol):
    """What a router believes of a message's sender (chosen once: `guard_for`)."""

    def check(
        self,
        envelope: TaskEnvelope,
        user_id: str | None,
        *,
        returned_from: str | None = None,
        amqp_priority: int = 0,
    ) -> TaskEnvelope | Refusal: ...

    def sender(self, user_id: str | None) -> tuple[str, str]:
        """Who sent a task, as `TaskStore.submit` takes it: (sender, sender's agent)."""
        ...

    def may_answer(self, reply_to: str, user_id: str | None) -> bool:
        """May a body from `user_id` that is no task be answered at `reply_to`?"""
        ...


class OpenGuard:
    """Access control off: every sender is believed and no task_id has an owner."""

    def check(
        self,
        envelope: TaskEnvelope,
        user_id: str | None,
        *,
        returned_from: str | None = None,
        amqp_priority: int = 0,
    ) -> TaskEnvelope | Refusal:
        return envelope

    def sender(self, user_id: str | None) -> tuple[str, str]:
        return "", ""

    def may_answer(self, reply_to: str, user_id: str | None) -> bool:
        return True


class IngressGuard:
    """Access control on: the sender decides (see the module docstring)."""

    def __init__(self, settings: Any, topology: Topology) -> None:
        self.scope = AccessScope.from_settings(settings)
        self.topology = topology

    def check(
        self,
        envelope: TaskEnvelope,
        user_id: str | None,
        *,
        returned_from: str | None = None,
        amqp_priority: int = 0,
    ) -> TaskEnvelope | Refusal:
        """The envelope to route (maybe restamped), or why it is refused.

        An ingress message whose AMQP priority (what ordered it in the router queue) is
        above its envelope's is refused: a caller may not jump the queue past what its
        task says (`message_priority`)."""
        role = self.scope.role_of(user_id or "")
        if returned_from is not None:
            router = role is not None and role.kind == "router"
            if router or self.scope.is_worker_of(user_id, returned_from):
                return envelope
            return Refusal(
                "not_a_dispatch",
                f"a message from user {user_id!r} came back from agent {returned_from!r}'s "
                "queue: only a router's dispatch (or that agent's retry) may",
            )
        if not user_id or role is None:
            return Refusal(
                "unknown_user", f"ingress message from {user_id!r}, not a user of this mesh"
            )
        if amqp_priority > message_priority(envelope.priority):
            return Refusal(
                "priority_above_envelope",
                f"AMQP priority {amqp_priority} is above the envelope's priority "
                f"{envelope.priority}: publish it with priority={envelope.priority}",
                answer=self.may_answer(envelope.reply_to or "", user_id),
            )
        own = self.topology.reply_queue(f"{user_id}.")
        if envelope.reply_to is not None and not self.may_answer(envelope.reply_to, user_id):
            return Refusal(
                "reply_to_not_yours",
                f"reply_to {envelope.reply_to!r} is not a reply queue of user {user_id!r} "
                f"(those start {own!r})",
            )
        if role.kind == "client":
            envelope = envelope.model_copy(
                update={
                    "source": user_id[:128],
                    "hops": 0,
                    "trajectory": [],
                    "attempt": 0,
                    "reroutes": 0,
                    "excluded_agents": [],
                    "route": None,
                }
            )
        elif role.kind == "worker" and envelope.source != role.name:
            # a worker's handoff comes from its own agent, whatever the body claims
            envelope = envelope.model_copy(update={"source": role.name})
        return envelope

    def may_answer(self, reply_to: str, user_id: str | None) -> bool:
        """Only a reply queue of the sender's own user, by exact name
        (``<ns>.reply.<user>.<id>``, an id without dots: `reply_queue_regex`, the regex
        its broker grant has): a body naming another caller's queue and ids must not end
        that caller's task, and user ``web`` does not own ``web.eu``'s queues."""
        role = self.scope.role_of(user_id or "") if user_id else None
        if not user_id or role is None:
            return False
        agent = role.name if role.kind == "worker" else None
        return re.fullmatch(reply_queue_regex(self.topology, user_id, agent), reply_to) is not None

    def sender(self, user_id: str | None) -> tuple[str, str]:
        """The broker user who sent a task (its task_id is that user's), and for a worker
        its agent (a worker's task must be a handoff of a task dispatched to that agent)."""
        role = self.scope.role_of(user_id or "")
        agent = role.name if role is not None and role.kind == "worker" else ""
        return user_id or "", agent


def guard_for(settings: Any, topology: Topology) -> Guard:
    return IngressGuard(settings, topology) if settings.access_control else OpenGuard()


__all__ = ["Guard", "IngressGuard", "OpenGuard", "guard_for"]
