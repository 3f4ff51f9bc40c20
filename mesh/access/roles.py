r"""The role model of docs/security.md as data: role -> broker permissions and Redis ACL.

Pure: no I/O, nothing here talks to a broker or to Redis (`mesh.access.provision` does).
The broker permissions of every role but admin are folded from the rows of
`mesh.contract.TABLE` (`amqp_permissions`), the table the AsyncAPI operations are rendered
from too, so who may send or receive what is written once. The Redis ACLs stay here
(`REDIS_KEYS`, `redis_acl`): they are about key families, not channels, and the table has
no row for them. Every regex is built from the names of `mesh.topology.Topology`, every
Redis key pattern from `mesh.keys.Keys`; every name is escaped (``re.escape`` for the broker's
regexes, glob escaping for Redis patterns). RabbitMQ 3.10 does not expand ``{username}``
in ordinary permission regexes, so each user gets regexes generated for its own name.

Broker user names
-----------------
A broker user is global to the broker (users are not per vhost) and the same namespace can
exist in several vhosts, so a user name is ``<prefix><role>``, with the role as in
docs/security.md (``admin``, ``router``, ``registry``, ``worker.<agent_id>``, ``client.<name>``,
``observer.<name>``) and the prefix by default:

- ``<namespace>:`` in the default vhost ``/`` (``mesh:router``, ``mesh:worker.support.refunds``);
- ``<vhost>:<namespace>:`` in any other vhost (``tenant1:mesh:client.alice``).

``:`` cannot occur in a namespace (``[a-z0-9_.-]``), so a namespace ``mesh.x`` can never
produce a user of namespace ``mesh`` and the other way round. ``--user-prefix`` chooses
another prefix (``""`` gives the bare names of docs/security.md, for a broker with one mesh).
The Redis ACL user of a role has the same name as its broker user. `AccessScope.role_of`
is the inverse (what a service checking ``message.user_id`` will need). Every user
`mesh access` creates carries the broker tag `PROVISIONED_TAG` (not a management tag: it
grants nothing), so `revoke` never deletes a user it did not create and `provision` refuses
to take over a same-named user created by somebody else.

Known limits of name-based regexes (the names are the topology's, not ours): an instance id
is ``<agent_id>-<suffix>``, so worker ``a`` also matches instance and session queue names of
an agent ``a-b``; in quorum mode agent ``x``'s band queue ``<ns>.agent.x.high`` is the queue
of an agent named ``x.high``; admin's ``^<ns>\..*`` also covers a namespace ``<ns>.sub``
in the same vhost. One vhost per tenant is the isolation boundary; the Redis keys carry
the vhost too (`mesh.keys.tenant_prefix`), so `redis_acl` of one tenant names no key of
another, whatever the namespaces.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from mesh import contract
from mesh.access import patterns
from mesh.access.patterns import ANY_KEY, lit, starting
from mesh.contract import Consume, Publish, Who
from mesh.errors import ConfigError
from mesh.keys import Keys
from mesh.schemas.envelope import Identifier
from mesh.topology import DEAD_REASONS, Topology

RoleKind = Literal["admin", "router", "registry", "worker", "client", "observer"]
#: roles that exist once per namespace, and roles that exist once per name
SINGLE_ROLES: tuple[RoleKind, ...] = ("admin", "router", "registry")
NAMED_ROLES: tuple[RoleKind, ...] = ("worker", "client", "observer")

#: broker user tag marking the users `mesh access provision` created (grants nothing)
PROVISIONED_TAG = "mesh-access"
#: a permission regex that matches no resource (RabbitMQ's own convention)
NOTHING = "^$"

#: guard rails per role: (max-connections, max-channels) of the broker user
DEFAULT_LIMITS: dict[RoleKind, tuple[int, int]] = {
    "admin": (4, 64),
    "router": (32, 1024),
    "registry": (8, 256),
    "worker": (64, 2048),
    "client": (16, 256),
    "observer": (4, 32),
}
#: max-length-bytes of each dead-letter queue (policy, overflow reject-publish)
DEFAULT_DEAD_LETTER_MAX_BYTES = 64 * 1024 * 1024
#: policy priority of the dead-letter cap (above an operator's catch-all at 0)
DEAD_LETTER_POLICY_PRIORITY = 10

_IDENTIFIER: TypeAdapter[str] = TypeAdapter(Identifier)
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


@dataclass(frozen=True, slots=True, order=True)
class Role:
    """One role: ``admin``, ``router``, ``registry`` or ``worker|client|observer.<name>``."""

    kind: RoleKind
    name: str = ""

    def __post_init__(self) -> None:
        if self.kind in SINGLE_ROLES:
            if self.name:
                raise ConfigError(f"role {self.kind!r} takes no name, got {self.name!r}")
            return
        if self.kind not in NAMED_ROLES:
            raise ConfigError(f"unknown role {self.kind!r}")
        try:
            _IDENTIFIER.validate_python(self.name)
        except ValidationError:
            raise ConfigError(
                f"{self.kind} name {self.name!r} must be 1..128 characters of "
                "A-Z a-z 0-9 _ . : @ - (as an agent_id)"
            ) from None

    @property
    def label(self) -> str:
        """The role as docs/security.md writes it: ``router``, ``worker.<agent_id>``..."""
        return self.kind if not self.name else f"{self.kind}.{self.name}"

    @classmethod
    def parse(cls, label: str) -> Role | None:
        """Inverse of `label` (None for a text that is no role)."""
        kind, dot, name = label.partition(".")
        try:
            if kind in SINGLE_ROLES and not dot:
                return cls(kind)
            if kind in NAMED_ROLES and dot:
                return cls(kind, name)
        except ConfigError:
            return None
        return None


def vhost_of(settings: Any) -> str:
    """The vhost ``MESH_AMQP_URL`` opens (its first node's; ``/`` when the path is empty)."""
    path = urllib.parse.urlsplit(settings.amqp_urls[0].get_secret_value()).path
    return urllib.parse.unquote(path[1:]) if len(path) > 1 else "/"


def default_user_prefix(namespace: str, vhost: str) -> str:
    """``<namespace>:`` in vhost ``/``, ``<vhost>:<namespace>:`` elsewhere (module docstring)."""
    return f"{namespace}:" if vhost == "/" else f"{vhost}:{namespace}:"


@dataclass(frozen=True, slots=True)
class AccessScope:
    """Where users live: a vhost, a namespace in it, and the prefix of their names."""

    namespace: str
    vhost: str = "/"
    prefix: str | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> AccessScope:
        """The scope a process runs in: its namespace, the vhost of its first AMQP URL, and
        ``MESH_ACCESS_USER_PREFIX`` when set."""
        return cls(settings.namespace, vhost_of(settings), settings.access_user_prefix)

    def is_worker_of(self, user: str | None, agent_id: str | None) -> bool:
        """Whether `user` is the worker user of `agent_id` in this scope."""
        role = self.role_of(user or "")
        return role is not None and role.kind == "worker" and role.name == agent_id

    @property
    def user_prefix(self) -> str:
        return (
            default_user_prefix(self.namespace, self.vhost) if self.prefix is None else self.prefix
        )

    def user(self, role: Role) -> str:
        """The broker (and Redis ACL) user name of `role`."""
        return self.user_prefix + role.label

    def role_of(self, user: str) -> Role | None:
        """The role a user name of this scope stands for (None: not one of this scope)."""
        if not user.startswith(self.user_prefix):
            return None
        return Role.parse(user[len(self.user_prefix) :])


@dataclass(frozen=True, slots=True)
class FutureNames:
    """Wire names docs/security.md expects that `Topology` lacks yet (the gap, in one place).

    Move these into `mesh.topology` when the services use them; the permissions follow.
    """

    topology: Topology

    @property
    def _ns(self) -> str:
        return self.topology.namespace

    @property
    def results(self) -> str:
        """Exchange workers publish Results to, and the queue the routers consume them from."""
        return self.topology.results

    @property
    def replies(self) -> str:
        """Topic exchange of Results to callers, keys ``reply.<caller-user>.<client-id>``."""
        return self.topology.replies

    @property
    def sessions(self) -> str:
        """Topic exchange of registry answers, keys ``session.<agent>.<instance>``."""
        return self.topology.sessions

    @property
    def bids(self) -> str:
        """Topic exchange of bids, keys ``bid.<router-id>`` (bid queues: `Topology.bid_queue`)."""
        return self.topology.bids

    def reply_queue_prefix(self, user: str) -> str:
        """Reply queues of a user are ``Topology.reply_queue("<user>.<client-id>")``."""
        return patterns.reply_queue_prefix(self.topology, user)

    def observer_queue_prefix(self, user: str) -> str:
        """Queues an observer declares for itself: `Topology.observer_queue`."""
        return self.topology.observer_queue_prefix(user)

    def reply_key_prefix(self, user: str | None = None) -> str:
        """Reply keys of `user` (None: every reply key)."""
        return patterns.reply_key_prefix(self.topology, user)

    def session_key_prefix(self, agent_id: str | None = None) -> str:
        """Registry answers to instances of `agent_id` (instance ids start ``<agent_id>-``)."""
        return patterns.session_key_prefix(self.topology, agent_id)

    def bid_key_prefix(self) -> str:
        return self.topology.bid_key("")

    def retry_key_regex(self, agent_id: str) -> str:
        """Retry keys of a topic retry exchange: ``<delay>.`` + the agent's dispatch key."""
        return patterns.retry_key_regex(self.topology, agent_id)

    def missing(self) -> list[tuple[str, str]]:
        """(name, what it is) of every object the permissions name that the topology lacks."""
        return [
            (self.observer_queue_prefix("<user>") + "*", "observer queues"),
            (self.reply_queue_prefix("<user>") + "*", "per-user reply queues"),
        ]


def anchored(atoms: Iterable[str]) -> str:
    """``^(?:a|b|...)$``; no atom: `NOTHING`."""
    parts = list(dict.fromkeys(atoms))
    if not parts:
        return NOTHING
    if len(parts) == 1:
        return f"^{parts[0]}$"
    return "^(?:" + "|".join(parts) + ")$"


def glob_escape(text: str) -> str:
    """`text` as a literal inside a Redis glob pattern."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


@dataclass(frozen=True, slots=True)
class TopicPermission:
    """Routing-key regexes of one topic exchange (write: publish; read: bind)."""

    exchange: str
    write: str
    read: str


@dataclass(frozen=True, slots=True)
class RedisAcl:
    """An ACL user's rules after ``reset`` (``ACL SETUSER <user> reset on >pw <rules...>``)."""

    commands: tuple[str, ...]
    keys: tuple[str, ...] = ()

    @property
    def rules(self) -> tuple[str, ...]:
        return ("resetchannels", *self.commands, *self.keys)

    @property
    def scripting(self) -> bool:
        """Whether the user may call the mesh's Redis functions (never EVAL: `_LUA_COMMANDS`)."""
        return "+fcall" in self.commands


@dataclass(frozen=True, slots=True)
class Grant:
    """Everything one role gets: broker permissions, topic permissions, limits, Redis ACL."""

    role: Role
    user: str
    configure: str
    write: str
    read: str
    topics: tuple[TopicPermission, ...]
    max_connections: int
    max_channels: int
    redis: RedisAcl


@dataclass(frozen=True, slots=True)
class DeadLetterPolicy:
    name: str
    pattern: str
    max_length_bytes: int
    priority: int = DEAD_LETTER_POLICY_PRIORITY
    apply_to: str = "queues"

    @property
    def definition(self) -> dict[str, object]:
        return {"max-length-bytes": self.max_length_bytes, "overflow": "reject-publish"}


@dataclass(frozen=True, slots=True)
class Plan:
    """What `provision` creates for one scope: grants per role and the dead-letter policy."""

    scope: AccessScope
    grants: tuple[Grant, ...]
    policy: DeadLetterPolicy
    max_queues: int | None = None
    future: tuple[tuple[str, str], ...] = field(default=())

    def grant(self, role: Role) -> Grant:
        for g in self.grants:
            if g.role == role:
                return g
        raise KeyError(role.label)


# --- Redis ---------------------------------------------------------------------------------
_SENTINEL = "\x00"
#: commands no role gets: a key-name listing that crosses tenants (SCAN, RANDOMKEY; KEYS
#: is @dangerous), another database (the key patterns hold in all of them) and SELECT,
#: which the mesh never sends (it uses one database; keys carry the tenant)
_NO_ROLE_COMMANDS = ("-scan", "-randomkey", "-dbsize", "-select", "-move", "-copy")
#: Lua roles: data commands, no @dangerous, and of the scripting commands only the
#: mesh's Redis functions (FCALL): no EVAL, SCRIPT LOAD/DEBUG or FUNCTION LOAD, so no role
#: runs code of its own that could block Redis for everyone (`mesh.functions`); TIME is
#: what the functions read the clock with
_LUA_COMMANDS = (
    "-@all",
    "+@read",
    "+@write",
    "+@connection",
    "+@transaction",
    "+time",
    "-@dangerous",
    "-@scripting",
    *_NO_ROLE_COMMANDS,
    "+fcall",
    "+fcall_ro",
)
_READ_ONLY_COMMANDS = (
    "-@all",
    "+@read",
    "+@connection",
    "-@dangerous",
    "-@scripting",
    *_NO_ROLE_COMMANDS,
)
#: an observer reads, and writes its own keys (no Lua: it runs no script)
_OBSERVER_COMMANDS = (
    "-@all",
    "+@read",
    "+@write",
    "+@connection",
    "+time",
    "-@dangerous",
    "-@scripting",
    *_NO_ROLE_COMMANDS,
)
#: a client runs no Redis command but PING: `connect` checks that Redis answers
_NO_COMMANDS = ("-@all", "+ping")


def _key_glob(built: str) -> str:
    """The glob of a key builder called with `_SENTINEL`: the text before it escaped, and
    everything from there ``*``."""
    cut = built.find(_SENTINEL)
    return glob_escape(built) if cut < 0 else glob_escape(built[:cut]) + "*"


def redis_key_patterns(namespace: str, vhost: str = "/") -> dict[str, str]:
    """Glob of each `Keys` family of the tenant (`namespace` in `vhost`), by family name."""
    k = Keys(namespace, vhost)
    s = _SENTINEL
    built: dict[str, str] = {
        "fence": k.fence(s),
        "instance": k.instance(s),
        "agent": k.agent(s),
        "agent_instances": k.agent_instances(s),
        "current_token": k.current_token(s, s),
        "agents": k.agents(),
        "leases": k.leases(),
        "embedding": k.embedding(s, s),
        "memory": k.memory(s),
        "memory_marker": k.memory_marker(s, s),
        "outcome": k.outcome(s),
        "breaker": k.breaker(s),
        "breakers_version": k.breakers_version(),
        "cold_start": k.cold_start(s),
        "stats": k.stats(s),
        "idem": k.idem(s),
        "task": k.task(s),
        "task_history": k.task_history(s),
        "task_waiters": k.task_waiters(s),
        "processing": k.processing(),
        "human_desk": k.human_desk(),
        "human_task": k.human_task(s),
        "effect_done": k.effect_done(s, s),
        "trace_visits": k.trace_visits(s),
        "trace_owner": k.trace_owner(s),
        "trace": k.trace(s),
        "context": k.context(s, 0),
        "context_version": k.context_version(s),
        "side_effect": k.side_effect(s),
        "observer_figures": k.observer_figures(s),
        "dispatched_to": k.dispatched_to(s),
        "compound": k.compound(s),
        "sealed": k.sealed(s, s),
    }
    return {name: _key_glob(value) for name, value in built.items()}


#: Redis key families per role: (read-write, read-only); docs/security.md "Redis ACLs"
REDIS_KEYS: dict[RoleKind, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "registry": (
        ("fence", "instance", "agent", "agent_instances", "current_token", "agents", "leases"),
        (),
    ),
    "router": (
        (
            "task",
            "task_history",
            "task_waiters",
            "processing",
            "idem",
            "trace_owner",
            "embedding",
            "memory",
            "memory_marker",
            "outcome",
            "breaker",
            "breakers_version",
            "cold_start",
            "stats",
            "dispatched_to",
            "human_desk",
            "human_task",
            "compound",
        ),
        ("instance", "agent", "agent_instances", "agents", "leases", "sealed"),
    ),
    # a worker's task records (claim, commit, side-effect markers, trace visits) and the
    # contexts it reads and saves are in its agent's view (`Keys.for_agent`, added by
    # `redis_acl`; a router copies a task's context there: `mesh.dispatch.context`), none
    # of the mesh's own
    "worker": (
        ("side_effect",),
        ("instance",),
    ),
}


#: the observer's key families: (read-write, read-only)
OBSERVER_KEYS: tuple[tuple[str, ...], tuple[str, ...]] = (
    ("trace", "observer_figures"),
    ("task", "task_history", "instance", "agent", "agent_instances", "agents", "leases"),
)


def redis_acl(kind: RoleKind, namespace: str, name: str = "", vhost: str = "/") -> RedisAcl:
    """The Redis ACL of a role of the tenant (`namespace` in `vhost`): only keys of that
    tenant (`Keys.pattern`), none of another vhost's or namespace's. A client may only
    PING; a worker (`name`: its agent id) also writes the Results sealed under its agent."""
    keys_of = Keys(namespace, vhost)
    patterns = redis_key_patterns(namespace, vhost)
    everything = glob_escape(keys_of.prefix) + ":*"
    if kind == "client":
        return RedisAcl(_NO_COMMANDS)
    if kind == "observer":
        # only what it shows (docs/security.md): writes the traces and figures it keeps, reads
        # task states and the agent registry; no Results (idem, sealed), contexts,
        # waiters, routing memory or request texts
        own = tuple("~" + patterns[f] for f in OBSERVER_KEYS[0])
        read = tuple("%R~" + patterns[f] for f in OBSERVER_KEYS[1])
        return RedisAcl(_OBSERVER_COMMANDS, (*own, *read))
    if kind == "admin":
        return RedisAcl(_LUA_COMMANDS, ("~" + everything,))
    rw, ro = REDIS_KEYS[kind]
    keys = tuple("~" + patterns[f] for f in rw) + tuple("%R~" + patterns[f] for f in ro)
    if kind == "router":
        # every agent's view: a router seeds a task there and finishes the mesh's record
        keys += ("~" + glob_escape(keys_of.prefix) + ":agent/*",)
    if kind == "worker" and name:
        keys += (
            "~" + _key_glob(keys_of.sealed(name, _SENTINEL)),
            "~" + glob_escape(keys_of.for_agent(name).prefix) + ":*",
        )
    return RedisAcl(_LUA_COMMANDS, keys)


# --- the broker ----------------------------------------------------------------------------
def grant_for(
    role: Role,
    scope: AccessScope,
    topology: Topology,
    *,
    limits: tuple[int | None, int | None] = (None, None),
    observer_reads_requests: bool = False,
) -> Grant:
    """Broker permissions, topic permissions, limits and Redis ACL of `role` (docs/security.md);
    an observer binds events with request texts only with `observer_reads_requests`."""
    user = scope.user(role)
    if role.kind == "admin":
        everything = anchored([starting(topology.namespace + ".")])
        configure = write = read = everything
        topics: tuple[TopicPermission, ...] = ()
    else:
        configure, write, read, topics = amqp_permissions(
            contract.rows_of(role.kind),
            Who(topology, user, role.name, reads_requests=observer_reads_requests),
        )
    default_conn, default_chan = DEFAULT_LIMITS[role.kind]
    return Grant(
        role=role,
        user=user,
        configure=configure,
        write=write,
        read=read,
        topics=topics,
        max_connections=limits[0] if limits[0] is not None else default_conn,
        max_channels=limits[1] if limits[1] is not None else default_chan,
        redis=redis_acl(role.kind, topology.namespace, role.name, scope.vhost),
    )


def amqp_permissions(
    rows: Iterable[contract.Row], who: Who
) -> tuple[str, str, str, tuple[TopicPermission, ...]]:
    """Configure, write and read regexes and topic permissions of `who` for the granted
    `rows` (`mesh.contract.TABLE`): a `Publish` writes its exchange, a `Consume` reads its
    queues, an `Own` configures, writes and reads its queues (listed last) and reads the
    exchanges they bind; the routing keys of topic exchanges become topic permissions."""
    t = who.topology
    own: list[str] = []
    write: list[str] = []
    read: list[str] = []
    # exchange -> (write atoms, read atoms), in the order the rows name them
    keys: dict[str, tuple[list[str], list[str]]] = {}
    for row in rows:
        if not row.granted:
            continue
        g = row.grant
        if isinstance(g, Publish):
            exchange = g.exchange(t)
            write.append(lit(exchange))
            if g.keys is not None:
                keys.setdefault(exchange, ([], []))[0].extend(g.keys(who))
        elif isinstance(g, Consume):
            read.append(g.queue(who))
        else:
            own.append(g.queues(who))
            for bind in g.binds:
                exchange = bind.exchange(t)
                read.append(lit(exchange))
                keys.setdefault(exchange, ([], []))[1].extend(bind.keys(who))
    topics = tuple(
        TopicPermission(exchange, _topic_regex(w), _topic_regex(r))
        for exchange, (w, r) in keys.items()
    )
    return anchored(own), anchored([*write, *own]), anchored([*read, *own]), topics


def _topic_regex(atoms: Sequence[str]) -> str:
    """`anchored`, but `patterns.ANY_KEY` stays the broker's plain ``.*``."""
    return ANY_KEY if ANY_KEY in atoms else anchored(atoms)


def dead_letter_policy(topology: Topology, max_length_bytes: int) -> DeadLetterPolicy:
    """``max-length-bytes`` + ``overflow: reject-publish`` on every dead-letter queue."""
    return DeadLetterPolicy(
        name=f"{topology.namespace}.dead-letter-cap",
        pattern=anchored(lit(topology.dead_queue(r)) for r in DEAD_REASONS),
        max_length_bytes=max_length_bytes,
    )


def roles_for(
    agents: Sequence[str] = (), clients: Sequence[str] = (), observers: Sequence[str] = ()
) -> list[Role]:
    """admin, router, registry, then one role per agent, client and observer (deduplicated)."""
    roles = [Role(kind) for kind in SINGLE_ROLES]
    named: list[tuple[RoleKind, Sequence[str]]] = [
        ("worker", agents),
        ("client", clients),
        ("observer", observers),
    ]
    for kind, names in named:
        roles.extend(Role(kind, n) for n in dict.fromkeys(names))
    return roles


def build_plan(
    scope: AccessScope,
    topology: Topology,
    roles: Iterable[Role],
    *,
    max_connections: int | None = None,
    max_channels: int | None = None,
    dead_letter_max_bytes: int = DEFAULT_DEAD_LETTER_MAX_BYTES,
    max_queues: int | None = None,
    observer_reads_requests: bool = False,
) -> Plan:
    """The grants of `roles` in `scope`, the dead-letter policy and the vhost limit."""
    if topology.namespace != scope.namespace:
        raise ConfigError(
            f"topology namespace {topology.namespace!r} differs from {scope.namespace!r}"
        )
    grants = tuple(
        grant_for(
            r,
            scope,
            topology,
            limits=(max_connections, max_channels),
            observer_reads_requests=observer_reads_requests,
        )
        for r in roles
    )
    users = [g.user for g in grants]
    if len(set(users)) != len(users):
        raise ConfigError(f"two roles map to the same user name in {users}")
    return Plan(
        scope=scope,
        grants=grants,
        policy=dead_letter_policy(topology, dead_letter_max_bytes),
        max_queues=max_queues,
        future=tuple(FutureNames(topology).missing()),
    )


def describe(plan: Plan, out: Callable[[str], None]) -> None:
    """The plan as text (the ``--dry-run`` output): roles, regexes, limits, Redis rules."""
    s = plan.scope
    out(f"vhost {s.vhost!r}, namespace {s.namespace!r}, user prefix {s.user_prefix!r}")
    for g in plan.grants:
        out(f"role {g.role.label}: user {g.user!r}")
        out(f"  configure {g.configure}")
        out(f"  write     {g.write}")
        out(f"  read      {g.read}")
        for tp in g.topics:
            out(f"  topic {tp.exchange}: write {tp.write}  read {tp.read}")
        out(f"  limits max-connections={g.max_connections} max-channels={g.max_channels}")
        out(f"  redis {' '.join(g.redis.rules)}")
    p = plan.policy
    out(
        f"policy {p.name}: queues {p.pattern} max-length-bytes={p.max_length_bytes} "
        f"overflow=reject-publish priority={p.priority}"
    )
    if plan.max_queues is not None:
        out(f"vhost limit max-queues={plan.max_queues}")
    for name, what in plan.future:
        out(f"not in the topology yet: {name} ({what})")


__all__ = [
    "DEFAULT_LIMITS",
    "NOTHING",
    "PROVISIONED_TAG",
    "AccessScope",
    "DeadLetterPolicy",
    "FutureNames",
    "Grant",
    "Plan",
    "RedisAcl",
    "Role",
    "TopicPermission",
    "anchored",
    "build_plan",
    "describe",
    "glob_escape",
    "grant_for",
    "redis_acl",
    "redis_key_patterns",
    "roles_for",
]
