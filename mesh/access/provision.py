"""Apply a `mesh.access.roles.Plan`: broker users, permissions, limits, policies, Redis ACLs.

Blocking (the management API client is urllib, Redis is redis-py's sync client): call it
from a thread in async code. Side effects only; the role model is `mesh.access.roles`.

What `provision` does, in order, so that no user ever holds more than its plan:

1. every role is checked before anything changes: a broker user of that name that does
   not carry `PROVISIONED_TAG` (somebody else's), or a Redis ACL user without its broker
   user, is a `UserConflict`;
2. the vhost: must exist, or is created with ``create_vhost`` (the management API grants
   the user that creates a vhost ``.*`` on it; that grant is deleted again at once, so the
   provisioning login does not become a second, unrestricted mesh user of the tenant);
3. per role: the broker user (new: a fresh password; existing: kept, unless ``rotate``),
   its connection and channel limits, its topic permissions, then its permissions (a
   permission is never in place before the topic restrictions that narrow it), then the
   Redis ACL user (``ACL SETUSER <user> reset on >pw ...``; an existing one keeps its
   password and gets its rules replaced);
4. the dead-letter policy and, when asked, the vhost's ``max-queues``;
5. with `operator`: the operator login (`OPERATOR_REDIS_RULES`), the one `mesh access`
   itself runs as afterwards: a broker administrator and a Redis ACL user that may manage
   ACL users, kill clients and scripts and load the mesh's functions, and no key (new:
   fresh passwords; existing: kept, its rules re-applied); then the mesh's Redis function
   libraries (`LIBRARIES`, ``FUNCTION LOAD REPLACE``): the only server-side code a role
   may run (FCALL; no role may EVAL or load code of its own);
6. with `guest`: that broker user loses its password (``password_hash ""``: it cannot log
   in; ``rabbitmqctl change_password guest guest`` undoes it), the last management call;
7. with ``redis_default_off`` last: ``ACL SETUSER default off``.

Before anything changes, step 1 also refuses a plan whose Redis keys other provisioned
users may reach (`TenantConflict`): a provisioned user of another scope whose ACL key
patterns overlap the tenant's `Keys.pattern` (the same vhost and namespace under another
``--user-prefix``, or users provisioned before the vhost was part of the keys).

Passwords come from `secrets.token_urlsafe`, one per role and service; they are returned
once in `Credentials` (repr masked) and never logged. An existing user keeps its password,
which `provision` cannot know: its credentials are not returned again (``rotate`` issues
new ones). `revoke` deletes the Redis ACL users, topic permissions, permissions and broker
users of a scope (only users carrying the tag; RabbitMQ itself then closes their open
connections with CONNECTION_FORCED, and ``ACL DELUSER`` disconnects their Redis clients),
deletes the dead-letter policy (when revoking every role) and, when asked, the vhost.
"""

from __future__ import annotations

import logging
import os
import secrets
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import redis
from redis.exceptions import NoPermissionError, RedisError, ResponseError

from mesh.access.roles import (
    PROVISIONED_TAG,
    AccessScope,
    Grant,
    Plan,
    Role,
    dead_letter_policy,
)
from mesh.config import Settings, mask_url
from mesh.dispatch import lua as dispatch_lua
from mesh.errors import (
    AccessError,
    RedisAclRefused,
    ServiceUnavailable,
    TenantConflict,
    UserConflict,
    VhostMissing,
)
from mesh.functions import Library
from mesh.hints import start_hint
from mesh.keys import Keys
from mesh.management import Management
from mesh.registry import fencing, lease, state
from mesh.router import memory
from mesh.topology import Topology

logger = logging.getLogger(__name__)

Status = Literal["created", "rotated", "repaired", "kept"]
#: what became of the guest login and of Redis' `default` user
Switch = Literal["switched off", "already off", "absent"]
#: bytes of randomness of each generated password (token_urlsafe: ~1.3 characters a byte)
PASSWORD_BYTES = 24
#: the operator's name unless ``--operator`` says otherwise
DEFAULT_OPERATOR = "mesh-operator"
#: the broker's development login, disabled unless ``--keep-guest``
DEFAULT_GUEST = "guest"
#: broker tags of the operator: the management API's administrator, and ours
OPERATOR_TAGS = ("administrator", PROVISIONED_TAG)
#: Redis rules of the operator (after ``reset``): ACL users, CLIENT KILL (``+@connection``),
#: the two kills no role has (a runaway Lua script or function), loading the mesh's
#: function libraries (`LIBRARIES`), no key and no data command
OPERATOR_REDIS_RULES = (
    "resetchannels",
    "-@all",
    "+@connection",
    "+acl",
    "+client|kill",
    "+script|kill",
    "+function|kill",
    "+function|load",
    "+function|list",
)
#: every Redis function library of the mesh: the only code its roles may run (FCALL)
LIBRARIES: tuple[Library, ...] = (
    dispatch_lua.LIBRARY,
    fencing.LIBRARY,
    lease.LIBRARY,
    state.LIBRARY,
    memory.LIBRARY,
)
#: ACL rule prefixes that name key patterns (``~p``, ``%R~p``, ``%W~p``, ``%RW~p``)
_KEY_RULE = ("~", "%R~", "%W~", "%RW~")


@dataclass(frozen=True, slots=True)
class Endpoints:
    """Where the provisioned roles connect: the hosts of the settings' URLs, new logins.

    ``MESH_AMQP_URL`` may list the nodes of one cluster, comma separated: each role's
    ``MESH_AMQP_URL`` then lists the same nodes, each with the role's login.
    """

    amqp: tuple[urllib.parse.SplitResult, ...]
    redis: urllib.parse.SplitResult
    management: urllib.parse.SplitResult | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoints:
        nodes = [u.get_secret_value() for u in settings.amqp_urls]
        return cls(
            tuple(urllib.parse.urlsplit(node.strip()) for node in nodes),
            urllib.parse.urlsplit(settings.redis_url.get_secret_value()),
            urllib.parse.urlsplit(settings.management_url.get_secret_value()),
        )

    def management_url(self, user: str, password: str) -> str:
        base = self.management or urllib.parse.urlsplit("http://127.0.0.1:15672/")
        return _with_login(base, user, password, base.path or "/")

    def amqp_url(self, user: str, password: str, vhost: str) -> str:
        path = "/" if vhost == "/" else "/" + urllib.parse.quote(vhost, safe="")
        return ",".join(_with_login(node, user, password, path) for node in self.amqp)

    def redis_url(self, user: str, password: str) -> str:
        return _with_login(self.redis, user, password, self.redis.path)


def _with_login(base: urllib.parse.SplitResult, user: str, password: str, path: str) -> str:
    host = base.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    if base.port is not None:
        host = f"{host}:{base.port}"
    login = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
    return urllib.parse.urlunsplit((base.scheme, f"{login}@{host}", path, base.query, ""))


@dataclass(frozen=True, slots=True)
class Credentials:
    """The logins of one role; ``repr`` masks the passwords."""

    role: Role
    user: str
    namespace: str
    vhost: str
    amqp_url: str = field(repr=False)
    redis_url: str = field(repr=False)

    @property
    def label(self) -> str:
        return self.role.label

    @property
    def header(self) -> str:
        return f"# mesh role {self.role.label}: user {self.user!r} in vhost {self.vhost!r}"

    def env_lines(self) -> list[str]:
        """``KEY=VALUE`` lines for this role (what `Settings.from_env` reads)."""
        return [
            self.header,
            f"MESH_NAMESPACE={self.namespace}",
            f"MESH_AMQP_URL={self.amqp_url}",
            f"MESH_REDIS_URL={self.redis_url}",
        ]

    def __str__(self) -> str:
        amqp = ",".join(mask_url(node) for node in self.amqp_url.split(","))
        return f"{self.role.label}: {amqp} {mask_url(self.redis_url)} (namespace {self.namespace})"


@dataclass(frozen=True, slots=True)
class OperatorCredentials:
    """The operator's logins (`mesh access` runs as it once guest and `default` are off);
    None where a login was kept (its password is not known); ``repr`` masks them."""

    user: str
    management_url: str | None = field(default=None, repr=False)
    redis_url: str | None = field(default=None, repr=False)

    label = "operator"

    def env_lines(self) -> list[str]:
        """``KEY=VALUE`` lines of what `mesh access` reads (no namespace: it is global)."""
        lines = [f"# mesh role operator: user {self.user!r} (for `mesh access` only)"]
        if self.management_url is not None:
            lines.append(f"MESH_MANAGEMENT_URL={self.management_url}")
        if self.redis_url is not None:
            lines.append(f"MESH_REDIS_URL={self.redis_url}")
        return lines


class EnvBlock(Protocol):
    """What the env writers take: a role's or the operator's credentials."""

    @property
    def label(self) -> str: ...

    def env_lines(self) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class OperatorResult:
    user: str
    broker: Status
    redis: Status
    credentials: OperatorCredentials | None = None


@dataclass(frozen=True, slots=True)
class RoleResult:
    grant: Grant
    status: Status
    credentials: Credentials | None = None


@dataclass(frozen=True, slots=True)
class ProvisionReport:
    plan: Plan
    vhost_created: bool
    results: tuple[RoleResult, ...]
    redis_default_off: bool
    operator: OperatorResult | None = None
    #: (guest user name, what became of it); None: it was left as it is
    guest: tuple[str, Switch] | None = None
    #: what became of Redis' `default` user; None: it was left as it is
    redis_default: Switch | None = None
    #: the Redis function libraries loaded (`LIBRARIES`)
    functions: tuple[str, ...] = ()

    def credentials(self) -> list[Credentials]:
        return [r.credentials for r in self.results if r.credentials is not None]

    def of(self, role: Role) -> RoleResult:
        for r in self.results:
            if r.grant.role == role:
                return r
        raise KeyError(role.label)


@dataclass(frozen=True, slots=True)
class RevokeReport:
    scope: AccessScope
    removed: tuple[str, ...]
    absent: tuple[str, ...]
    redis_removed: tuple[str, ...]
    policy_removed: str | None
    vhost_deleted: bool


class Provisioner:
    """Provision and revoke the users of a `Plan` through `management` and `redis_client`."""

    def __init__(
        self,
        management: Management,
        redis_client: redis.Redis,
        endpoints: Endpoints,
        *,
        redis_masked_url: str = "",
        password: Callable[[], str] = lambda: secrets.token_urlsafe(PASSWORD_BYTES),
    ) -> None:
        self._mgmt = management
        self._redis: Any = redis_client  # redis-py: execute_command is untyped
        self._endpoints = endpoints
        self._redis_masked = redis_masked_url
        self._password = password

    @classmethod
    def from_settings(cls, settings: Settings) -> Provisioner:
        client = redis.Redis.from_url(
            settings.redis_url.get_secret_value(),
            socket_connect_timeout=settings.connect_timeout_s,
            socket_timeout=settings.connect_timeout_s * 2,
        )
        return cls(
            Management(settings),
            client,
            Endpoints.from_settings(settings),
            redis_masked_url=settings.redis_url_masked,
        )

    def close(self) -> None:
        self._redis.close()

    # --- provision -------------------------------------------------------------------------
    def provision(
        self,
        plan: Plan,
        *,
        create_vhost: bool = False,
        rotate: bool = False,
        operator: str | None = None,
        guest: str | None = None,
        redis_default_off: bool = False,
    ) -> ProvisionReport:
        """Create (or bring up to date) everything of `plan`; idempotent. `operator`: also
        the operator login of that name; `guest`: then take that broker user's password
        away; `redis_default_off`: then switch Redis' `default` user off (module docstring).

        Raises:
            VhostMissing: the vhost does not exist and `create_vhost` is false.
            UserConflict: a user of a role's (or the operator's) name exists and is not one
                `provision` made.
            TenantConflict: provisioned users of another scope may reach the plan's keys.
            RedisAclRefused: the Redis login may not run ``ACL`` commands.
            ManagementRequestFailed: the management API refused a request.
        """
        scope = plan.scope
        statuses = self._check(plan.grants, rotate)  # raises before anything changed
        operator_status = self._check_operator(operator) if operator is not None else None
        self._check_tenant(scope)
        vhost_created = self._ensure_vhost(scope, create_vhost)
        results = [self._apply(scope, g, statuses[g.user]) for g in plan.grants]
        p = plan.policy
        self._mgmt.put_policy(
            scope.vhost,
            p.name,
            pattern=p.pattern,
            definition=p.definition,
            priority=p.priority,
            apply_to=p.apply_to,
        )
        logger.info("policy %s on %s in vhost %r", p.name, p.pattern, scope.vhost)
        if plan.max_queues is not None:
            self._mgmt.put_vhost_limit(scope.vhost, "max-queues", plan.max_queues)
        made = None
        if operator is not None and operator_status is not None:
            made = self._apply_operator(operator, *operator_status)
        # after the operator's rules (an operator of an older version gains function|load)
        functions = self.load_functions()
        guest_done = (guest, self._disable_guest(guest)) if guest is not None else None
        default_done = self._default_off() if redis_default_off else None
        return ProvisionReport(
            plan,
            vhost_created,
            tuple(results),
            redis_default_off,
            operator=made,
            guest=guest_done,
            redis_default=default_done,
            functions=functions,
        )

    def load_functions(self, libraries: Sequence[Library] = LIBRARIES) -> tuple[str, ...]:
        """``FUNCTION LOAD REPLACE`` of each library (idempotent); their names.

        Raises:
            RedisAclRefused: the Redis login may not load functions.
        """
        for library in libraries:
            try:
                library.load_sync(self._redis)
            except NoPermissionError:
                raise RedisAclRefused(
                    f"Redis at {self._redis_masked} refused FUNCTION LOAD to this login: set "
                    "MESH_REDIS_URL to the operator (re-run `mesh access provision` as a "
                    "user with +function|load, e.g. `default`, to give it that rule)"
                ) from None
            except ResponseError as exc:
                raise AccessError(f"Redis refused FUNCTION LOAD {library.name}: {exc}") from None
            except (OSError, RedisError):
                raise ServiceUnavailable(
                    "Redis", self._redis_masked, start_hint("MESH_REDIS_URL")
                ) from None
            logger.info("Redis function library %s loaded", library.name)
        return tuple(library.name for library in libraries)

    # --- the operator, guest and Redis' default user ----------------------------------------
    def _check_operator(self, name: str) -> tuple[Status, Status]:
        """(broker, Redis) status of the operator login; raises before anything changed."""
        existing = self._mgmt.get_user(name)
        in_redis = self._acl_user_exists(name)
        if existing is not None and PROVISIONED_TAG not in _tags(existing):
            raise UserConflict(
                f"broker user {name!r} exists and was not created by `mesh access provision`"
                f" (no tag {PROVISIONED_TAG!r}): choose another --operator"
            )
        if existing is None and in_redis:
            raise UserConflict(
                f"Redis ACL user {name!r} exists without its broker user: delete it "
                "(ACL DELUSER) or choose another --operator"
            )
        if existing is None:
            return "created", "created"
        return "kept", "kept" if in_redis else "created"

    def _apply_operator(self, name: str, broker: Status, redis_status: Status) -> OperatorResult:
        management_url = redis_url = None
        if broker == "created":
            password = self._password()
            self._mgmt.put_user(name, password, OPERATOR_TAGS)
            management_url = self._endpoints.management_url(name, password)
        if redis_status == "created":
            password = self._password()
            rules = ["reset", "on", f">{password}", *OPERATOR_REDIS_RULES]
            self._acl("ACL", "SETUSER", name, *rules, secret=password)
            redis_url = self._endpoints.redis_url(name, password)
        else:  # keep the password, replace the rules
            self._acl("ACL", "SETUSER", name, "on", "resetkeys", *OPERATOR_REDIS_RULES)
        logger.info("operator %r: broker user %s, Redis user %s", name, broker, redis_status)
        creds = None
        if management_url is not None or redis_url is not None:
            creds = OperatorCredentials(name, management_url, redis_url)
        return OperatorResult(name, broker, redis_status, creds)

    def _disable_guest(self, name: str) -> Switch:
        """Take the password of broker user `name` away (the last management call)."""
        user = self._mgmt.get_user(name)
        if user is None:
            return "absent"
        if user.get("password_hash") == "":
            return "already off"
        self._mgmt.put_user(name, None, tuple(_tags(user)))
        logger.warning("broker user %r can no longer log in with a password", name)
        return "switched off"

    def _default_off(self) -> Switch:
        """``ACL SETUSER default off`` (the last Redis call)."""
        flags = _acl_field(self._acl("ACL", "GETUSER", "default"), "flags")
        if flags is not None and "off" in flags:
            return "already off"
        self._acl("ACL", "SETUSER", "default", "off")
        logger.warning("Redis user 'default' switched off")
        return "switched off"

    def _check_tenant(self, scope: AccessScope) -> None:
        """Refuse a scope whose keys provisioned users of another scope may reach."""
        ours = Keys(scope.namespace, scope.vhost).prefix + ":"
        provisioned = {
            u["name"]
            for u in self._mgmt.users()
            if PROVISIONED_TAG in _tags(u) and scope.role_of(u["name"]) is None
        }
        rows = self._acl("ACL", "LIST")
        for row in rows if isinstance(rows, list) else []:
            words = (row.decode() if isinstance(row, bytes) else str(row)).split(" ")
            if len(words) < 2 or words[0] != "user" or words[1] not in provisioned:
                continue
            for word in words[2:]:
                reach = _pattern_reach(word)
                if reach is not None and (reach.startswith(ours) or ours.startswith(reach)):
                    raise TenantConflict(
                        f"Redis ACL user {words[1]!r} (another scope's) may reach the keys "
                        f"{ours}* of namespace {scope.namespace!r} in vhost {scope.vhost!r} "
                        f"through {word!r}: two user prefixes of one tenant share its keys "
                        "(use the --user-prefix its users have), or that user was provisioned "
                        "before the vhost was part of the keys (re-run `mesh access provision` "
                        "for its scope), or revoke it"
                    )

    def _ensure_vhost(self, scope: AccessScope, create: bool) -> bool:
        if self._mgmt.vhost(scope.vhost) is not None:
            return False
        if not create:
            raise VhostMissing(
                f"vhost {scope.vhost!r} does not exist on RabbitMQ: pass --create-vhost "
                "(or --vhost NAME of an existing one)"
            )
        self._mgmt.put_vhost(
            scope.vhost, description=f"mesh namespace {scope.namespace} (mesh access)"
        )
        # the API grants the vhost's creator `.*` on it: take that back
        self._mgmt.delete_permissions(scope.vhost, self._mgmt.user)
        logger.info("created vhost %r", scope.vhost)
        return True

    def _check(self, grants: Sequence[Grant], rotate: bool) -> dict[str, Status]:
        """The status of each grant's user; raises before anything changed."""
        statuses: dict[str, Status] = {}
        for g in grants:
            existing = self._mgmt.get_user(g.user)
            in_redis = self._acl_user_exists(g.user)
            if existing is not None and PROVISIONED_TAG not in _tags(existing):
                raise UserConflict(
                    f"broker user {g.user!r} exists and was not created by `mesh access "
                    f"provision` (no tag {PROVISIONED_TAG!r}): delete it or choose another "
                    "--user-prefix"
                )
            if existing is None:
                if in_redis:
                    raise UserConflict(
                        f"Redis ACL user {g.user!r} exists without its broker user: delete it "
                        "(ACL DELUSER) or choose another --user-prefix"
                    )
                statuses[g.user] = "created"
            elif not in_redis:
                statuses[g.user] = "repaired"
            else:
                statuses[g.user] = "rotated" if rotate else "kept"
        return statuses

    def _apply(self, scope: AccessScope, g: Grant, status: Status) -> RoleResult:
        vhost = scope.vhost
        new_login = status != "kept"
        amqp_pw = self._password() if new_login else None
        redis_pw = self._password() if new_login else None
        if amqp_pw is not None:
            self._mgmt.put_user(g.user, amqp_pw, (PROVISIONED_TAG,))
        self._mgmt.put_user_limit(g.user, "max-connections", g.max_connections)
        self._mgmt.put_user_limit(g.user, "max-channels", g.max_channels)
        self._set_permissions(vhost, g, fresh=status == "created")
        self._set_acl(g, redis_pw)
        logger.info("role %s: user %r %s in vhost %r", g.role.label, g.user, status, vhost)
        if amqp_pw is None or redis_pw is None:
            return RoleResult(g, status)
        creds = Credentials(
            role=g.role,
            user=g.user,
            namespace=scope.namespace,
            vhost=vhost,
            amqp_url=self._endpoints.amqp_url(g.user, amqp_pw, vhost),
            redis_url=self._endpoints.redis_url(g.user, redis_pw),
        )
        return RoleResult(g, status, creds)

    def _set_permissions(self, vhost: str, g: Grant, *, fresh: bool) -> None:
        wanted = {tp.exchange: (tp.write, tp.read) for tp in g.topics}
        if not fresh:
            current = {
                row["exchange"]: (row.get("write"), row.get("read"))
                for row in self._mgmt.topic_permissions(vhost, g.user)
            }
            if set(current) - set(wanted):
                # an exchange the plan no longer restricts: the API deletes topic permissions
                # only all at once, so take the permissions away while they are rebuilt
                self._mgmt.put_permissions(vhost, g.user, configure="^$", write="^$", read="^$")
                self._mgmt.delete_topic_permissions(vhost, g.user)
        for exchange, (write, read) in wanted.items():
            self._mgmt.put_topic_permission(
                vhost, g.user, exchange=exchange, write=write, read=read
            )
        self._mgmt.put_permissions(vhost, g.user, configure=g.configure, write=g.write, read=g.read)

    # --- Redis -----------------------------------------------------------------------------
    def _acl(self, *args: str, secret: str | None = None) -> Any:
        try:
            return self._redis.execute_command(*args)
        except NoPermissionError:
            raise RedisAclRefused(
                f"Redis at {self._redis_masked} refused ACL commands to this login: set "
                "MESH_REDIS_URL to a user allowed to run ACL (the `default` user, or one with "
                "+acl)"
            ) from None
        except ResponseError as exc:
            text = str(exc)
            if secret:
                text = text.replace(secret, "******")
            raise AccessError(f"Redis refused {args[0]} {args[1]}: {text}") from None
        except (OSError, RedisError):
            raise ServiceUnavailable(
                "Redis", self._redis_masked, start_hint("MESH_REDIS_URL")
            ) from None

    def _acl_user_exists(self, user: str) -> bool:
        return self._acl("ACL", "GETUSER", user) is not None

    def _set_acl(self, g: Grant, password: str | None) -> None:
        if password is not None:
            args = ["ACL", "SETUSER", g.user, "reset", "on", f">{password}", *g.redis.rules]
        else:  # keep the password, replace everything else
            args = ["ACL", "SETUSER", g.user, "on", "resetkeys", "clearselectors", *g.redis.rules]
        self._acl(*args, secret=password)

    # --- revoke ----------------------------------------------------------------------------
    def provisioned_users(self, scope: AccessScope) -> list[str]:
        """Broker users of `scope` that `provision` created (they carry the tag)."""
        return sorted(
            u["name"]
            for u in self._mgmt.users()
            if PROVISIONED_TAG in _tags(u) and scope.role_of(u["name"]) is not None
        )

    def revoke(
        self,
        scope: AccessScope,
        roles: Iterable[Role] | None = None,
        *,
        delete_vhost: bool = False,
        dry_run: bool = False,
    ) -> RevokeReport:
        """Remove the users of `roles` (None: every provisioned user of `scope`)."""
        ours = self.provisioned_users(scope)
        if roles is None:
            targets, absent = ours, []
        else:
            wanted = [scope.user(r) for r in roles]
            targets = [u for u in wanted if u in ours]
            absent = [u for u in wanted if u not in ours]
        policy = dead_letter_policy(Topology(namespace=scope.namespace), 1).name
        everything = roles is None
        if dry_run:
            redis_users = [u for u in targets if self._acl_user_exists(u)]
            return RevokeReport(
                scope, tuple(targets), tuple(absent), tuple(redis_users),
                policy if everything else None, delete_vhost,
            )  # fmt: skip
        redis_removed = []
        for user in targets:
            if self._acl("ACL", "DELUSER", user):
                redis_removed.append(user)
            self._mgmt.delete_topic_permissions(scope.vhost, user)
            self._mgmt.delete_permissions(scope.vhost, user)
            self._mgmt.delete_user(user)
            logger.info("revoked user %r in vhost %r", user, scope.vhost)
        if everything:
            self._mgmt.delete_policy(scope.vhost, policy)
        if delete_vhost:
            self._mgmt.delete_vhost(scope.vhost)
            logger.info("deleted vhost %r", scope.vhost)
        return RevokeReport(
            scope,
            tuple(targets),
            tuple(absent),
            tuple(redis_removed),
            policy if everything else None,
            delete_vhost,
        )


def _pattern_reach(rule: str) -> str | None:
    """The literal text every key a key-pattern rule (``~p``, ``%R~p``...) matches starts
    with (``""``: any key); None for a rule that names no keys."""
    if rule == "allkeys":
        return ""
    for head in _KEY_RULE:
        if rule.startswith(head):
            pattern = rule[len(head) :]
            break
    else:
        return None
    literal: list[str] = []
    chars = iter(pattern)
    for ch in chars:
        if ch == "\\":
            literal.append(next(chars, ""))
        elif ch in "*?[":
            break
        else:
            literal.append(ch)
    return "".join(literal)


def _acl_field(answer: Any, name: str) -> list[str] | None:
    """A field of an ``ACL GETUSER`` answer (RESP2: a flat list; RESP3: a dict) as text."""
    if isinstance(answer, list):
        answer = dict(zip(answer[::2], answer[1::2], strict=False))
    if not isinstance(answer, dict):
        return None
    for key, value in answer.items():
        if (key.decode() if isinstance(key, bytes) else key) == name:
            items = value if isinstance(value, list) else [value]
            return [v.decode() if isinstance(v, bytes) else str(v) for v in items]
    return None


def _tags(user: dict[str, Any]) -> list[str]:
    """A user's tags (3.10 answers a list; older brokers a comma-separated string)."""
    tags = user.get("tags") or []
    if isinstance(tags, str):
        return [t for t in tags.split(",") if t]
    return [str(t) for t in tags]


# --- credentials out -----------------------------------------------------------------------
def env_text(credentials: Sequence[EnvBlock]) -> str:
    """Every role's ``KEY=VALUE`` block, each under its ``# mesh role ...`` header."""
    return "".join("\n".join(c.env_lines()) + "\n\n" for c in credentials)


def _sections(text: str) -> dict[str, str]:
    """The blocks of an env file written by `env_text`, by role label."""
    blocks: dict[str, str] = {}
    label: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith("# mesh role "):
            if label is not None:
                blocks[label] = "\n".join(lines).strip() + "\n\n"
            # "# mesh role <label>: user ...": a label has no space (it may hold ':')
            label = line[len("# mesh role ") :].split(" ", 1)[0][:-1]
            lines = [line]
        elif label is not None:
            lines.append(line)
    if label is not None:
        blocks[label] = "\n".join(lines).strip() + "\n\n"
    return blocks


def write_secret_file(path: Path, text: str) -> None:
    """Write `text` to `path` with mode 0600 (atomically: a temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_env_file(path: Path, credentials: Sequence[EnvBlock]) -> None:
    """Write the roles' blocks into one file (0600); blocks of other roles already there stay."""
    old = _sections(path.read_text(encoding="utf-8")) if path.exists() else {}
    new = {c.label: "\n".join(c.env_lines()) + "\n\n" for c in credentials}
    write_secret_file(path, "".join({**old, **new}.values()))


def write_env_dir(directory: Path, credentials: Sequence[EnvBlock]) -> list[Path]:
    """One ``<role>.env`` file (0600) per role in `directory` (created 0700)."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = []
    for c in credentials:
        path = directory / f"{c.label}.env"
        write_secret_file(path, "\n".join(c.env_lines()) + "\n")
        paths.append(path)
    return paths


__all__ = [
    "DEFAULT_GUEST",
    "DEFAULT_OPERATOR",
    "LIBRARIES",
    "OPERATOR_REDIS_RULES",
    "Credentials",
    "Endpoints",
    "EnvBlock",
    "OperatorCredentials",
    "OperatorResult",
    "ProvisionReport",
    "Provisioner",
    "RevokeReport",
    "RoleResult",
    "env_text",
    "write_env_dir",
    "write_env_file",
    "write_secret_file",
]
