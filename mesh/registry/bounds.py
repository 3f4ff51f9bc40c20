"""What an agent's own credential may claim in its profile (``MESH_ACCESS_CONTROL``).

Admission (`mesh.registry.admission`) decides who speaks for an agent; these are the
bounds on what it says, so a worker login cannot buy itself traffic:

- ``priority_bonus`` at most the operator's grant: `Settings.priority_bonus_limits` of the
  agent, else `Settings.max_priority_bonus` (0 by default: any positive bonus wins every
  tie against an agent whose texts it copied); lowering oneself (down to -1) is free;
- ``max_concurrency`` of a registration at most `Settings.max_instance_concurrency` (a
  heartbeat above it is taken at the bound: the router reads free capacity from it);
- a profile (everything of a registration but its instance id and concurrency) changes at
  most once per `Settings.profile_change_interval_s` per agent: each change costs every
  router an embedding of the texts. A registration with the agent's current profile (a new
  instance, a re-registration after a lost lease) is never held back, nor are heartbeats.

Pure: the registry reads the agent's current profile and Redis' clock and asks here.
"""

from __future__ import annotations

from mesh.access.refusal import Refusal
from mesh.config import Settings
from mesh.schemas import Registration


class ProfileBounds:
    """The bounds of `settings` (cheap; one per registry)."""

    def __init__(self, settings: Settings) -> None:
        self.default_bonus = settings.max_priority_bonus
        self.bonus_limits = dict(settings.priority_bonus_limits)
        self.max_concurrency = settings.max_instance_concurrency
        self.change_interval_ms = round(settings.profile_change_interval_s * 1000)

    def max_bonus(self, agent_id: str) -> float:
        """The highest priority_bonus `agent_id` may claim."""
        return self.bonus_limits.get(agent_id, self.default_bonus)

    def refusal(self, registration: Registration) -> Refusal | None:
        """None when `registration` stays within the bounds of its agent."""
        agent_id = registration.agent_id
        limit = self.max_bonus(agent_id)
        if registration.priority_bonus > limit:
            return Refusal(
                "priority_bonus_too_high",
                f"priority_bonus {registration.priority_bonus} of agent {agent_id!r} is above "
                f"its limit {limit} (the operator grants more with MESH_PRIORITY_BONUS_LIMITS "
                "or MESH_MAX_PRIORITY_BONUS)",
            )
        if registration.max_concurrency > self.max_concurrency:
            return Refusal(
                "max_concurrency_too_high",
                f"max_concurrency {registration.max_concurrency} of instance "
                f"{registration.instance_id!r} is above {self.max_concurrency} "
                "(MESH_MAX_INSTANCE_CONCURRENCY)",
            )
        return None

    def concurrency(self, declared: int) -> int:
        """A heartbeat's max_concurrency, taken at most at the bound."""
        return min(declared, self.max_concurrency)

    def change_refusal(
        self,
        registration: Registration,
        current: Registration | None,
        updated_ms: int | None,
        now_ms: int,
    ) -> Refusal | None:
        """None unless `registration` changes the agent's `current` profile (registered at
        `updated_ms`) sooner than the interval allows."""
        if current is None or updated_ms is None or self.change_interval_ms <= 0:
            return None
        if same_profile(registration, current):
            return None
        wait_ms = updated_ms + self.change_interval_ms - now_ms
        if wait_ms <= 0:
            return None
        return Refusal(
            "profile_change_too_soon",
            f"agent {registration.agent_id!r} changed its profile less than "
            f"{self.change_interval_ms / 1000:g} s ago; register again in {wait_ms} ms or with "
            "the current profile (MESH_PROFILE_CHANGE_INTERVAL_S)",
        )


def same_profile(one: Registration, other: Registration) -> bool:
    """Whether two registrations of an agent say the same but for instance and concurrency."""
    same = {"instance_id": one.instance_id, "max_concurrency": one.max_concurrency}
    return one == other.model_copy(update=same)


__all__ = ["ProfileBounds", "same_profile"]
