"""Every Redis key of the mesh is built here, and nowhere else.

All keys of a tenant start with its prefix (`tenant_prefix`): the namespace in the default
vhost ``/`` (``mesh:task:<id>``, the keys of a mesh without vhosts), and
``<vhost, %-encoded>/<namespace>`` in any other vhost (``tenant1/mesh:task:<id>``). So two
tenants on one Redis (one vhost each, the same namespace in both) never share a key, a
test that uses its own namespace owns its keys and deletes them with one
``SCAN MATCH <prefix>:*`` (`Keys.pattern`), and a Redis ACL user gets its tenant's keys
with one pattern.

Why the prefixes cannot collide: a namespace is ``[a-z][a-z0-9_.-]*`` (no ``:`` and no
``/``) and a %-encoded vhost is ``[A-Za-z0-9_.~%-]*`` (``urllib.parse.quote(vhost, safe="")``,
injective, no ``:``, no ``/`` and no glob character), so the text before a key's first
``:`` is the whole prefix, and it holds a ``/`` exactly when the vhost is not ``/``.
"""

from __future__ import annotations

import dataclasses
import re
import urllib.parse
from dataclasses import dataclass, field

from mesh.errors import ConfigError

#: what `mesh.config.Settings.namespace` accepts (no ``:``, ``/`` or glob character)
_NAMESPACE = re.compile(r"[a-z][a-z0-9_.-]{0,63}")
DEFAULT_VHOST = "/"


def tenant_prefix(namespace: str, vhost: str = DEFAULT_VHOST) -> str:
    """The text every Redis key of (`namespace`, `vhost`) starts with, before its ``:``.

    Raises:
        ConfigError: `namespace` is not one `Settings` accepts, or `vhost` is empty.
    """
    if not _NAMESPACE.fullmatch(namespace):
        raise ConfigError(
            f"namespace {namespace!r} must be 1..64 characters a-z 0-9 _ . - starting with "
            "a letter (MESH_NAMESPACE)"
        )
    if not vhost:
        raise ConfigError("the vhost must not be empty (MESH_AMQP_URL's path)")
    if vhost == DEFAULT_VHOST:
        return namespace
    return f"{urllib.parse.quote(vhost, safe='')}/{namespace}"


@dataclass(frozen=True, slots=True)
class Keys:
    """Key builder for one tenant: ``Keys(settings.namespace, vhost_of(settings))``."""

    namespace: str
    vhost: str = DEFAULT_VHOST
    #: the agent whose view this is (`for_agent`): '' for the mesh's own keys
    view: str = ""
    #: `tenant_prefix` of the two (and the agent's view): the first part of every key
    prefix: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        prefix = tenant_prefix(self.namespace, self.vhost)
        if self.view:
            # ``/`` is in no id and closes the agent: agents ``x`` and ``x:y`` never share
            prefix = f"{prefix}:agent/{self.view}/"
        object.__setattr__(self, "prefix", prefix)

    def for_agent(self, agent_id: str) -> Keys:
        """The keys of `agent_id`'s view: the task records its workers claim and commit in
        under access control (``<prefix>:agent/<agent_id>/:task:<id>``, ...), which one
        Redis ACL pattern gives that agent's workers and nobody else's."""
        return dataclasses.replace(self, view=agent_id)

    def agent_view_pattern(self, agent_id: str = "*") -> str:
        """Glob of every key of `agent_id`'s view (``*``: of every agent's)."""
        return f"{tenant_prefix(self.namespace, self.vhost)}:agent/{agent_id}/:*"

    def pattern(self) -> str:
        """Glob matching every key of this tenant and no other's (cleanup, inspection, ACLs)."""
        return f"{self.prefix}:*"

    # --- registry --------------------------------------------------------------------------
    def fence(self, agent_id: str) -> str:
        """INCR counter: the last fencing token issued for `agent_id`."""
        return f"{self.prefix}:fence:{agent_id}"

    def instance(self, instance_id: str) -> str:
        """Hash: one instance's registration, token, load and last heartbeat."""
        return f"{self.prefix}:instance:{instance_id}"

    def agent(self, agent_id: str) -> str:
        """Hash: the logical agent's registration data (capability text, examples, tags)."""
        return f"{self.prefix}:agent:{agent_id}"

    def agent_instances(self, agent_id: str) -> str:
        """Set: instance ids of `agent_id`."""
        return f"{self.prefix}:agent-instances:{agent_id}"

    def current_token(self, agent_id: str, instance_id: str) -> str:
        """String: the token currently valid for this instance of `agent_id`."""
        return f"{self.prefix}:token:{agent_id}:{instance_id}"

    def agents(self) -> str:
        """Set: every agent_id ever registered and not forgotten."""
        return f"{self.prefix}:agents"

    def leases(self) -> str:
        """Sorted set: instance_id scored by lease expiry (epoch ms)."""
        return f"{self.prefix}:leases"

    # --- router ----------------------------------------------------------------------------
    def embedding(self, model_id: str, text_hash: str) -> str:
        """Bytes: a cached capability vector, by model and text hash."""
        return f"{self.prefix}:emb:{model_id}:{text_hash}"

    def memory(self, agent_id: str) -> str:
        """Hash: the agent's learned example memory (reservoir) and its counters."""
        return f"{self.prefix}:memory:{agent_id}"

    def memory_marker(self, agent_id: str, task_id: str) -> str:
        """String with TTL: this outcome of a task was already counted in the memory."""
        return f"{self.prefix}:memory-seen:{agent_id}:{task_id}"

    def outcome(self, task_id: str) -> str:
        """Hash: routing outcome of a task (chosen agent, text) kept for feedback."""
        return f"{self.prefix}:outcome:{task_id}"

    def breaker(self, agent_id: str) -> str:
        """String, expiring: until when (epoch ms) a router holds the agent's circuit
        breaker open (`mesh.router.breaker.SharedBreakers`)."""
        return f"{self.prefix}:breaker:{agent_id}"

    def breakers_version(self) -> str:
        """Counter: raised each time a router opens a breaker (readers re-read only then)."""
        return f"{self.prefix}:breakers-version"

    def cold_start(self, agent_id: str) -> str:
        """Hash, expiring: a cold agent's quota counters over every router: ``seen`` (tasks
        it was close on) and ``given`` (of those, the ones it got; `mesh.router.coldstart`)."""
        return f"{self.prefix}:cold-start:{agent_id}"

    def stats(self, agent_id: str) -> str:
        """Hash: per-agent success / failure counters."""
        return f"{self.prefix}:stats:{agent_id}"

    # --- dispatch --------------------------------------------------------------------------
    def idem(self, task_id: str) -> str:
        """Hash: idempotency claim / stored result of a task."""
        return f"{self.prefix}:idem:{task_id}"

    def task(self, task_id: str) -> str:
        """Hash: current state of a task."""
        return f"{self.prefix}:task:{task_id}"

    def task_history(self, task_id: str) -> str:
        """List: state transitions of a task, oldest first."""
        return f"{self.prefix}:task-history:{task_id}"

    def task_waiters(self, task_id: str) -> str:
        """Set: every reply_to recorded for a task_id (duplicate submissions wait together)."""
        return f"{self.prefix}:task-waiters:{task_id}"

    def compound(self, task_id: str) -> str:
        """Hash: a compound request's parts and its children's Results as they come back
        (`mesh.router.compound`; only routers write it)."""
        return f"{self.prefix}:compound:{task_id}"

    def dispatched_to(self, task_id: str) -> str:
        """Set: every agent a router dispatched the task to (access control; only routers
        write it: whose Result a router may forward)."""
        return f"{self.prefix}:dispatched:{task_id}"

    def sealed(self, agent_id: str, task_id: str) -> str:
        """String: the Result `agent_id`'s worker committed for a task (access control;
        only that agent's Redis user writes ``sealed:<agent_id>/``; ``/`` is in no id)."""
        return f"{self.prefix}:sealed:{agent_id}/{task_id}"

    def processing(self) -> str:
        """Sorted set: task_id scored by the epoch ms its maximum lifetime ends (reaper)."""
        return f"{self.prefix}:processing"

    def human_desk(self) -> str:
        """Sorted set: task_ids handed to a person (the human queue), by the epoch ms they
        were handed over (`mesh.dispatch.human`)."""
        return f"{self.prefix}:human-desk"

    def human_task(self, task_id: str) -> str:
        """Hash: a task handed to a person: its envelope, best score, threshold, when, and
        who took it (``taken_by``, set once: two people never answer the same task)."""
        return f"{self.prefix}:human-task:{task_id}"

    def instance_prefix(self) -> str:
        """Prefix of `instance()` keys, for Lua scripts that look up a claim holder's hash."""
        return f"{self.prefix}:instance:"

    def effect_done(self, task_id: str, name: str) -> str:
        """String: set once a task applied the side effect `name` (exactly-once effects)."""
        return f"{self.prefix}:effect-done:{task_id}:{name}"

    def trace_owner(self, trace_id: str) -> str:
        """String: the user whose task first used the trace_id (access control)."""
        return f"{self.prefix}:trace-owner:{trace_id}"

    def trace_visits(self, trace_id: str) -> str:
        """Hash: agent_id -> visits of one trace (loop detection)."""
        return f"{self.prefix}:trace-visits:{trace_id}"

    def trace(self, trace_id: str) -> str:
        """Sorted set: events of one trace (observer), the encoded event scored by its ts_ms
        (two observers storing one event store it once)."""
        return f"{self.prefix}:trace:{trace_id}"

    def observer_figures(self, name: str) -> str:
        """String with TTL: the last per-agent figures of observer `name` (`mesh stats`)."""
        return f"{self.prefix}:observer-figures:{name}"

    def context(self, trace_id: str, version: int, origin: str = "") -> str:
        """String: one version of a trace's shared context. Under access control a version
        is the agent's that saved it (`origin`, after a ``/``: in no id) and lives in agent
        views only: ``<prefix>:agent/<a>/:ctx:<trace>:<version>/<origin>`` in the saver's,
        and a router's copy in the view of each agent a task carrying it goes to."""
        tail = f"{version}/{origin}" if origin else str(version)
        return f"{self.prefix}:ctx:{trace_id}:{tail}"

    def context_version(self, trace_id: str) -> str:
        """INCR counter: the last context version of a trace (of an agent's saves on it, in
        the agent's view under access control)."""
        return f"{self.prefix}:ctx-version:{trace_id}"

    def side_effect(self, name: str) -> str:
        """Counter used by example agents and tests to count side effects."""
        return f"{self.prefix}:effect:{name}"

    # --- example agents ----------------------------------------------------------------------
    def demo(self, name: str) -> str:
        """The example team's business data (`agents/_data.py`: ``demo:order:<id>``,
        ``demo:parcel:<no>``, ``demo:refund:<order>``, ``demo:faq``...), seeded by
        `mesh demo`: the application's own store, not the mesh's (a handler gets no Redis
        client; the agents open their own). Under access control no role is granted it."""
        return f"{self.prefix}:demo:{name}"
