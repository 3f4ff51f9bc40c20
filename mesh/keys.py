"""Every Redis key of the mesh is built here, and nowhere else.

All keys start with the settings' namespace, so a test that uses its own namespace owns
its keys and can delete them with one `SCAN MATCH <namespace>:*`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder for one namespace (``Keys(settings.namespace)``)."""

    namespace: str

    def pattern(self) -> str:
        """Glob matching every key of this namespace (for cleanup and inspection)."""
        return f"{self.namespace}:*"

    # --- registry --------------------------------------------------------------------------
    def fence(self, agent_id: str) -> str:
        """INCR counter: the last fencing token issued for `agent_id`."""
        return f"{self.namespace}:fence:{agent_id}"

    def instance(self, instance_id: str) -> str:
        """Hash: one instance's registration, token, load and last heartbeat."""
        return f"{self.namespace}:instance:{instance_id}"

    def agent(self, agent_id: str) -> str:
        """Hash: the logical agent's registration data (capability text, examples, tags)."""
        return f"{self.namespace}:agent:{agent_id}"

    def agent_instances(self, agent_id: str) -> str:
        """Set: instance ids of `agent_id`."""
        return f"{self.namespace}:agent-instances:{agent_id}"

    def current_token(self, agent_id: str, instance_id: str) -> str:
        """String: the token currently valid for this instance of `agent_id`."""
        return f"{self.namespace}:token:{agent_id}:{instance_id}"

    def agents(self) -> str:
        """Set: every agent_id ever registered and not forgotten."""
        return f"{self.namespace}:agents"

    def leases(self) -> str:
        """Sorted set: instance_id scored by lease expiry (epoch ms)."""
        return f"{self.namespace}:leases"

    # --- router ----------------------------------------------------------------------------
    def embedding(self, model_id: str, text_hash: str) -> str:
        """Bytes: a cached capability vector, by model and text hash."""
        return f"{self.namespace}:emb:{model_id}:{text_hash}"

    def memory(self, agent_id: str) -> str:
        """Hash: the agent's learned example memory (reservoir) and its counters."""
        return f"{self.namespace}:memory:{agent_id}"

    def memory_marker(self, agent_id: str, task_id: str) -> str:
        """String with TTL: this outcome of a task was already counted in the memory."""
        return f"{self.namespace}:memory-seen:{agent_id}:{task_id}"

    def outcome(self, task_id: str) -> str:
        """Hash: routing outcome of a task (chosen agent, text) kept for feedback."""
        return f"{self.namespace}:outcome:{task_id}"

    def breaker(self, agent_id: str) -> str:
        """Hash: circuit breaker state of an agent."""
        return f"{self.namespace}:breaker:{agent_id}"

    def stats(self, agent_id: str) -> str:
        """Hash: per-agent success / failure counters."""
        return f"{self.namespace}:stats:{agent_id}"

    # --- dispatch --------------------------------------------------------------------------
    def idem(self, task_id: str) -> str:
        """Hash: idempotency claim / stored result of a task."""
        return f"{self.namespace}:idem:{task_id}"

    def task(self, task_id: str) -> str:
        """Hash: current state of a task."""
        return f"{self.namespace}:task:{task_id}"

    def task_history(self, task_id: str) -> str:
        """List: state transitions of a task, oldest first."""
        return f"{self.namespace}:task-history:{task_id}"

    def task_waiters(self, task_id: str) -> str:
        """Set: every reply_to recorded for a task_id (duplicate submissions wait together)."""
        return f"{self.namespace}:task-waiters:{task_id}"

    def dispatched_to(self, task_id: str) -> str:
        """Set: every agent a router dispatched the task to (access control; only routers
        write it: whose Result a router may forward)."""
        return f"{self.namespace}:dispatched:{task_id}"

    def sealed(self, agent_id: str, task_id: str) -> str:
        """String: the Result `agent_id`'s worker committed for a task (access control;
        only that agent's Redis user writes ``sealed:<agent_id>/``; ``/`` is in no id)."""
        return f"{self.namespace}:sealed:{agent_id}/{task_id}"

    def processing(self) -> str:
        """Sorted set: task_id scored by the epoch ms its maximum lifetime ends (reaper)."""
        return f"{self.namespace}:processing"

    def instance_prefix(self) -> str:
        """Prefix of `instance()` keys, for Lua scripts that look up a claim holder's hash."""
        return f"{self.namespace}:instance:"

    def effect_done(self, task_id: str, name: str) -> str:
        """String: set once a task applied the side effect `name` (exactly-once effects)."""
        return f"{self.namespace}:effect-done:{task_id}:{name}"

    def trace_owner(self, trace_id: str) -> str:
        """String: the user whose task first used the trace_id (access control)."""
        return f"{self.namespace}:trace-owner:{trace_id}"

    def trace_visits(self, trace_id: str) -> str:
        """Hash: agent_id -> visits of one trace (loop detection)."""
        return f"{self.namespace}:trace-visits:{trace_id}"

    def trace(self, trace_id: str) -> str:
        """Sorted set: events of one trace (observer), the encoded event scored by its ts_ms
        (two observers storing one event store it once)."""
        return f"{self.namespace}:trace:{trace_id}"

    def observer_figures(self, name: str) -> str:
        """String with TTL: the last per-agent figures of observer `name` (`mesh stats`)."""
        return f"{self.namespace}:observer-figures:{name}"

    def context(self, trace_id: str, version: int) -> str:
        """String: one version of a trace's shared context."""
        return f"{self.namespace}:ctx:{trace_id}:{version}"

    def context_version(self, trace_id: str) -> str:
        """INCR counter: the last context version of a trace."""
        return f"{self.namespace}:ctx-version:{trace_id}"

    def side_effect(self, name: str) -> str:
        """Counter used by example agents and tests to count side effects."""
        return f"{self.namespace}:effect:{name}"
