"""The role model of `mesh access` (SECURITY.md), checked without a broker or Redis.

RabbitMQ matches permission regexes with PCRE (Erlang ``re``); the regexes generated here
use only what Python's ``re`` reads the same way (escapes, ``(?:...)``, anchors), so the
assertions below say what the broker will match.
"""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from pathlib import Path

import pytest

from mesh.access.provision import Credentials, Endpoints, write_env_dir, write_env_file
from mesh.access.roles import (
    NOTHING,
    AccessScope,
    FutureNames,
    Grant,
    Role,
    build_plan,
    describe,
    glob_escape,
    grant_for,
    redis_acl,
    roles_for,
    vhost_of,
)
from mesh.cli.main import main
from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.keys import Keys
from mesh.topology import Topology

NS = "acme.prod"
TOPOLOGY = Topology(namespace=NS)
QUORUM = Topology(namespace=NS, queue_type="quorum")
SCOPE = AccessScope(NS)


def grant(role: Role, topology: Topology = TOPOLOGY) -> Grant:
    return grant_for(role, SCOPE, topology)


def matches(regex: str, name: str) -> bool:
    """What RabbitMQ does with a permission regex: a search (ours are anchored)."""
    return re.search(regex, name) is not None


def topic(g: Grant, exchange: str) -> tuple[str, str]:
    (tp,) = [tp for tp in g.topics if tp.exchange == exchange]
    return tp.write, tp.read


ALPHA = Role("worker", "team.alpha")
BETA = Role("worker", "team.beta")
WEB = Role("client", "web")


# --- names -----------------------------------------------------------------------------------
def test_user_names_carry_the_namespace_and_the_vhost() -> None:
    assert AccessScope("mesh").user(ALPHA) == "mesh:worker.team.alpha"
    assert AccessScope("mesh", "tenant1").user(Role("router")) == "tenant1:mesh:router"
    assert AccessScope("mesh", "tenant1", prefix="").user(WEB) == "client.web"
    # ':' never occurs in a namespace: namespace "mesh.x" cannot mint a user of "mesh"
    assert AccessScope("mesh").role_of(AccessScope("mesh.x").user(Role("router"))) is None


@pytest.mark.parametrize(
    "role", [Role("admin"), Role("router"), ALPHA, WEB, Role("observer", "ops@night")]
)
def test_role_of_inverts_user(role: Role) -> None:
    scope = AccessScope("mesh", "t1")
    assert scope.role_of(scope.user(role)) == role
    assert Role.parse(role.label) == role


@pytest.mark.parametrize("label", ["", "admin.x", "worker", "worker.", "guest", "client.a b"])
def test_labels_that_are_no_role(label: str) -> None:
    assert Role.parse(label) is None


def test_a_name_outside_the_agent_id_alphabet_is_refused() -> None:
    with pytest.raises(ConfigError, match="worker name"):
        Role("worker", "a*b")
    with pytest.raises(ConfigError, match="takes no name"):
        Role("router", "x")


# --- workers ---------------------------------------------------------------------------------
def test_a_worker_reads_its_own_agent_queue_and_not_another_agents() -> None:
    g = grant(ALPHA)
    assert matches(g.read, TOPOLOGY.agent_queue("team.alpha"))
    for band in ("high", "normal", "low"):
        assert matches(g.read, QUORUM.agent_queue("team.alpha", band))
    for other in (
        TOPOLOGY.agent_queue("team.beta"),
        TOPOLOGY.agent_queue("team.alphabet"),
        TOPOLOGY.agent_queue("team.alpha.other"),
        TOPOLOGY.router_queue,
        TOPOLOGY.registry,
        TOPOLOGY.dead_queue("expired"),
    ):
        assert not matches(g.read, other), other
    assert not matches(grant(BETA).read, TOPOLOGY.agent_queue("team.alpha"))


def test_dots_are_escaped() -> None:
    g = grant(ALPHA)
    assert not matches(g.read, "acmeXprod.agent.team.alpha")
    assert not matches(g.read, "acme.prod.agentXteam.alpha")
    assert not matches(g.read, "acme.prod.agent.teamXalpha")
    assert not matches(grant(Role("admin")).write, "acmeXprod.ingress")
    assert "acme\\.prod\\.agent\\.team\\.alpha" in g.read


def test_a_worker_declares_only_its_own_instance_session_and_reply_queues() -> None:
    g = grant(ALPHA)
    user = SCOPE.user(ALPHA)
    for own in (
        TOPOLOGY.instance_queue("team.alpha-1f2e"),
        TOPOLOGY.session_queue("team.alpha-1f2e"),
        TOPOLOGY.reply_queue(f"{user}.team.alpha-1f2e"),
    ):
        assert matches(g.configure, own), own
    for other in (
        TOPOLOGY.instance_queue("team.beta-1f2e"),
        TOPOLOGY.agent_queue("team.alpha"),  # topology is the admin's
        TOPOLOGY.reply_queue(f"{SCOPE.user(BETA)}.team.alpha-1"),
        TOPOLOGY.ingress,
    ):
        assert not matches(g.configure, other), other


def test_a_worker_writes_no_capabilities_and_no_default_exchange() -> None:
    g = grant(ALPHA)
    for name in (TOPOLOGY.capabilities, "amq.default", TOPOLOGY.control):
        assert not matches(g.write, name), name
    for name in (TOPOLOGY.ingress, TOPOLOGY.registry, TOPOLOGY.events, TOPOLOGY.retry):
        assert matches(g.write, name), name


def test_worker_topic_permissions_name_its_own_agent_only() -> None:
    g = grant(ALPHA)
    write, read = topic(g, TOPOLOGY.control)
    assert write == NOTHING
    assert matches(read, TOPOLOGY.control_agent_key("team.alpha"))
    assert matches(read, TOPOLOGY.instance_key("team.alpha-1f2e"))
    assert not matches(read, TOPOLOGY.control_agent_key("team.beta"))
    assert not matches(read, TOPOLOGY.instance_key("team.beta-1f2e"))
    write, _ = topic(g, TOPOLOGY.events)
    assert matches(write, "task.completed") and matches(write, "alert.loop")
    assert not matches(write, "agent.down") and not matches(write, "agent.up")
    write, _ = topic(g, TOPOLOGY.retry)
    assert matches(write, "1000.agent.team.alpha") and matches(write, "5000.agent.team.alpha.high")
    assert not matches(write, "1000.agent.team.beta")
    write, _ = topic(g, TOPOLOGY.dlx)
    assert matches(write, TOPOLOGY.dead_key("retries")) and not matches(write, "agent.team.beta")


# --- clients ---------------------------------------------------------------------------------
def test_a_client_reads_only_its_own_reply_queues() -> None:
    g = grant(WEB)
    user = SCOPE.user(WEB)
    own = TOPOLOGY.reply_queue(f"{user}.c1")
    assert matches(g.read, own) and matches(g.configure, own)
    for other in (
        TOPOLOGY.reply_queue(f"{SCOPE.user(Role('client', 'web2'))}.c1"),
        TOPOLOGY.reply_queue(f"{SCOPE.user(Role('client', 'other'))}.c1"),
        TOPOLOGY.reply_queue("c1"),
        TOPOLOGY.agent_queue("team.alpha"),
        TOPOLOGY.router_queue,
        TOPOLOGY.events,
        TOPOLOGY.ingress,  # so it cannot bind anything to ingress
    ):
        assert not matches(g.read, other), other
        assert not matches(g.configure, other), other
    _, read = topic(g, FutureNames(TOPOLOGY).replies)
    assert matches(read, f"reply.{user}.c1") and not matches(read, "reply.acme.prod:client.x.c1")


def test_a_client_whose_name_extends_anothers_by_a_dot_shares_no_reply_queue() -> None:
    web, web_eu = Role("client", "web"), Role("client", "web.eu")
    g = grant(web)
    theirs = TOPOLOGY.reply_queue(f"{SCOPE.user(web_eu)}.c1")
    assert theirs.startswith(TOPOLOGY.reply_queue(f"{SCOPE.user(web)}."))  # the old prefix
    assert not matches(g.read, theirs) and not matches(g.configure, theirs)
    _, read = topic(g, FutureNames(TOPOLOGY).replies)
    assert not matches(read, f"reply.{SCOPE.user(web_eu)}.c1")
    # each still owns its own, by exact name
    assert matches(g.read, TOPOLOGY.reply_queue(f"{SCOPE.user(web)}.c1"))
    assert matches(grant(web_eu).read, theirs)


def test_a_client_writes_ingress_and_nothing_else_of_the_mesh() -> None:
    g = grant(WEB)
    assert matches(g.write, TOPOLOGY.ingress)
    for name in (
        TOPOLOGY.capabilities,
        TOPOLOGY.events,
        TOPOLOGY.dlx,
        TOPOLOGY.registry,
        TOPOLOGY.retry,
        "amq.default",
    ):
        assert not matches(g.write, name), name


# --- services and observers ------------------------------------------------------------------
def test_the_router_dispatches_but_does_not_read_agent_queues() -> None:
    g = grant(Role("router"))
    assert matches(g.write, TOPOLOGY.capabilities) and matches(g.read, TOPOLOGY.router_queue)
    assert not matches(g.read, TOPOLOGY.agent_queue("team.alpha"))
    assert not matches(g.write, TOPOLOGY.ingress) and not matches(g.write, "amq.default")
    write, _ = topic(g, TOPOLOGY.capabilities)
    assert matches(write, TOPOLOGY.agent_routing_key("team.alpha"))
    assert not matches(write, "dead.expired")


def test_the_registry_configures_nothing_and_alone_writes_agent_events() -> None:
    g = grant(Role("registry"))
    assert g.configure == NOTHING
    assert matches(g.read, TOPOLOGY.registry) and not matches(g.read, TOPOLOGY.router_queue)
    write, _ = topic(g, TOPOLOGY.events)
    assert matches(write, "agent.down") and not matches(write, "task.completed")


def test_an_observer_reads_events_and_its_own_queues_only() -> None:
    g = grant(Role("observer", "ops"))
    own = FutureNames(TOPOLOGY).observer_queue_prefix(SCOPE.user(Role("observer", "ops"))) + "q"
    assert matches(g.read, TOPOLOGY.events) and matches(g.read, own)
    assert not matches(g.read, TOPOLOGY.router_queue) and not matches(g.write, TOPOLOGY.ingress)
    write, _ = topic(g, TOPOLOGY.events)  # its alerts, nothing that steers routing
    assert matches(write, "alert.no_match") and not matches(write, "task.completed")
    assert not matches(write, "agent.down") and not matches(write, "route.feedback")


def test_admin_owns_the_namespace_and_nothing_else() -> None:
    g = grant(Role("admin"))
    assert matches(g.configure, TOPOLOGY.router_queue)
    assert not matches(g.configure, "acme.prodx.router")
    assert not matches(g.configure, "other.router") and not matches(g.write, "amq.default")


def test_every_generated_regex_is_anchored_and_compiles() -> None:
    plan = build_plan(SCOPE, QUORUM, roles_for(["a.b", "x-y"], ["web"], ["ops"]))
    for g in plan.grants:
        for regex in (g.configure, g.write, g.read, *(t.write for t in g.topics)):
            re.compile(regex)
            assert regex.startswith("^") and regex.endswith("$"), (g.user, regex)
    assert re.fullmatch(plan.policy.pattern, QUORUM.dead_queue("invalid"))
    assert not re.search(plan.policy.pattern, QUORUM.agent_queue("a.b"))


# --- Redis -----------------------------------------------------------------------------------
def test_the_client_gets_no_redis_access() -> None:
    acl = redis_acl("client", NS)
    assert acl.rules == ("resetchannels", "-@all", "+ping") and not acl.keys


def test_the_worker_runs_lua_on_its_agents_view_only_and_nothing_dangerous() -> None:
    acl = redis_acl("worker", NS, "pay.ments")
    assert acl.scripting and "-@dangerous" in acl.commands
    assert acl.commands.index("-@dangerous") > acl.commands.index("+@write")
    # the task records it claims and commits in: its agent's view, none of the mesh's
    assert "~acme.prod:agent/pay.ments/:*" in acl.keys
    assert not any(f in k for k in acl.keys for f in (":task:", ":idem:", ":task-waiters:"))
    assert "%R~acme.prod:instance:*" in acl.keys
    assert not any(":fence:" in k or ":agent:" in k for k in acl.keys)
    # '/' closes the agent's name: agent x's pattern matches none of agent x:y's keys
    assert not fnmatch.fnmatchcase("acme.prod:agent/x:y/:task:t", "acme.prod:agent/x/:*")
    router = redis_acl("router", NS)
    assert "~acme.prod:agent/*" in router.keys and "~acme.prod:task:*" in router.keys


def test_a_worker_reads_and_saves_contexts_only_in_its_agents_view() -> None:
    acl = redis_acl("worker", NS, "pay.ments")
    globs = [key.split("~", 1)[1] for key in acl.keys if not key.startswith("%R")]
    k = Keys(NS)
    own = k.for_agent("pay.ments")
    mine = [own.context("tr", 1, "pay.ments"), own.context("tr", 2, "x"), own.context_version("tr")]
    others = [
        k.context("tr", 1),  # the mesh's keys (a worker wrote there before)
        k.context_version("tr"),
        k.for_agent("x").context("tr", 1, "x"),  # another agent's view
        k.for_agent("pay.ments:y").context("tr", 1, "pay.ments"),
    ]
    for key in mine:
        assert any(fnmatch.fnmatchcase(key, g) for g in globs), key
    for key in others:
        assert not any(fnmatch.fnmatchcase(key, g) for g in globs), key


def test_a_worker_seals_results_only_under_its_own_agent_and_routers_only_read_them() -> None:
    acl = redis_acl("worker", NS, "pay.ments")
    assert "~acme.prod:sealed:pay.ments/*" in acl.keys
    assert not any(k.endswith(":sealed:*") for k in acl.keys), "no other agent's seals"
    assert not any(":dispatched:" in k for k in acl.keys), "whose Result counts: routers only"
    # an agent id may hold ':' (x and x:y are two agents): the '/' keeps their seals apart
    assert fnmatch.fnmatchcase("acme.prod:sealed:x:y/t1", "acme.prod:sealed:x/*") is False
    router = redis_acl("router", NS)
    assert "~acme.prod:dispatched:*" in router.keys and "%R~acme.prod:sealed:*" in router.keys


def test_the_observer_reads_only_what_it_shows_writes_its_traces_and_runs_no_scripts() -> None:
    acl = redis_acl("observer", NS)
    assert not acl.scripting and "-@scripting" in acl.commands
    assert acl.keys == (
        "~acme.prod:trace:*",
        "~acme.prod:observer-figures:*",
        "%R~acme.prod:task:*",
        "%R~acme.prod:task-history:*",
        "%R~acme.prod:instance:*",
        "%R~acme.prod:agent:*",
        "%R~acme.prod:agent-instances:*",
        "%R~acme.prod:agents",
        "%R~acme.prod:leases",
    )
    k = Keys(NS)
    shown = [k.task("t1"), k.task_history("t1"), k.agent("a"), k.leases(), k.trace("tr")]
    hidden = [
        k.idem("t1"),  # stored Results
        k.sealed("a", "t1"),
        k.context("tr", 1),
        k.context_version("tr"),
        k.task_waiters("t1"),
        k.memory("a"),  # routing memory: request texts
        k.for_agent("a").task("t1"),  # an agent's view of its tasks
        k.side_effect("x"),
    ]
    globs = [key.split("~", 1)[1] for key in acl.keys]
    for key in shown:
        assert any(fnmatch.fnmatchcase(key, g) for g in globs), key
    for key in hidden:
        assert not any(fnmatch.fnmatchcase(key, g) for g in globs), key


def test_redis_patterns_escape_glob_characters() -> None:
    assert glob_escape("a*b?c[d]\\") == "a\\*b\\?c\\[d\\]\\\\"


# --- plan, dry run, credentials --------------------------------------------------------------
def test_repeated_names_give_one_role_each() -> None:
    plan = build_plan(SCOPE, TOPOLOGY, roles_for(["a", "a"], ["a"]))
    assert [g.role.label for g in plan.grants][3:] == ["worker.a", "client.a"]
    assert plan.future, "the permissions name objects the topology does not have yet"


def test_dry_run_prints_the_plan_and_needs_no_broker(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MESH_NAMESPACE", NS)
    monkeypatch.setenv("MESH_MANAGEMENT_URL", "http://nobody:x@127.0.0.1:1/")
    argv = ["access", "provision", "--vhost", "t1", "--agent", "team.alpha", "--dry-run"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "role worker.team.alpha: user 't1:acme.prod:worker.team.alpha'" in out
    assert r"acme\.prod\.agent\.team\.alpha" in out and "policy acme.prod.dead-letter-cap" in out


def test_a_bad_agent_id_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["access", "provision", "--agent", "a b", "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mesh: --agent: worker name 'a b'")


def _creds(label: str, password: str) -> Credentials:
    role = Role.parse(label)
    assert role is not None
    ends = Endpoints.from_settings(Settings())
    user = SCOPE.user(role)
    return Credentials(
        role, user, NS, "/", ends.amqp_url(user, password, "/"), ends.redis_url(user, password)
    )


def test_credentials_never_show_a_password_in_repr_or_str() -> None:
    creds = _creds("worker.team.alpha", "s3cret-pw")
    assert "s3cret-pw" not in repr(creds) and "s3cret-pw" not in str(creds)
    assert creds.amqp_url == "amqp://acme.prod%3Aworker.team.alpha:s3cret-pw@127.0.0.1:5672/"
    settings = Settings.from_env(dict(line.split("=", 1) for line in creds.env_lines()[1:]))
    assert settings.namespace == NS
    assert settings.redis_url.get_secret_value().startswith("redis://acme.prod%3Aworker")


def test_env_files_are_0600_and_keep_other_roles_blocks(tmp_path: Path) -> None:
    path = tmp_path / "mesh.env"
    write_env_file(path, [_creds("router", "pw-one"), _creds("client.web", "pw-two")])
    write_env_file(path, [_creds("router", "pw-three")])
    text = path.read_text()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert "pw-one" not in text and "pw-three" in text and "pw-two" in text
    assert text.count("# mesh role ") == 2
    (written,) = write_env_dir(tmp_path / "roles", [_creds("worker.team.alpha", "pw")])
    assert written.name == "worker.team.alpha.env"
    assert stat.S_IMODE(os.stat(written).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(tmp_path / "roles").st_mode) == 0o700


def test_describe_lists_every_role() -> None:
    plan = build_plan(SCOPE, TOPOLOGY, roles_for(["a"], ["b"], ["c"]))
    lines: list[str] = []
    describe(plan, lines.append)
    roles = [line.split(":")[0] for line in lines if line.startswith("role ")]
    assert roles == [
        "role admin",
        "role router",
        "role registry",
        "role worker.a",
        "role client.b",
        "role observer.c",
    ]


def test_a_label_with_a_colon_keeps_its_own_env_block(tmp_path: Path) -> None:
    path = tmp_path / "mesh.env"
    write_env_file(path, [_creds("worker.a:b", "pw-one"), _creds("worker.a", "pw-two")])
    write_env_file(path, [_creds("worker.a:b", "pw-three")])
    text = path.read_text()
    assert "pw-one" not in text and "pw-two" in text and "pw-three" in text


# --- the provisioner's order of operations, with fakes -------------------------------------
class FakeManagement:
    user = "guest"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[object, ...]]] = []
        self.users_: dict[str, dict[str, object]] = {}

    def __getattr__(self, name: str) -> object:
        def record(*args: object, **kwargs: object) -> object:
            self.calls.append((name, args + tuple(kwargs.values())))
            if name == "put_user":
                hashed = "" if args[1] is None else "hash"
                tags = list(args[2])  # type: ignore[call-overload]
                self.users_[str(args[0])] = {"name": args[0], "tags": tags, "password_hash": hashed}
            if name == "topic_permissions":
                return []
            return {"name": "/"} if name == "vhost" else None

        return record

    def get_user(self, name: str) -> dict[str, object] | None:
        return self.users_.get(name)

    def users(self) -> list[dict[str, object]]:
        return list(self.users_.values())


class FakeRedis:
    def __init__(self) -> None:
        self.commands: list[tuple[str, ...]] = []
        self.acl_users: set[str] = set()
        self.acl_list: list[bytes] = []
        self.default_flags = [b"on", b"nopass"]

    def execute_command(self, *args: str) -> object:
        self.commands.append(args)
        if args[:3] == ("ACL", "GETUSER", "default"):
            return [b"flags", self.default_flags, b"passwords", []]
        if args[:2] == ("ACL", "GETUSER"):
            return {} if args[2] in self.acl_users else None
        if args[:2] == ("ACL", "LIST"):
            return self.acl_list
        if args[:2] == ("ACL", "SETUSER"):
            self.acl_users.add(args[2])
            if args[2] == "default" and "off" in args:
                self.default_flags = [b"off", b"nopass"]
        return True


def _fake_provisioner() -> tuple[object, FakeManagement, FakeRedis]:
    from mesh.access.provision import Provisioner

    management, fake_redis = FakeManagement(), FakeRedis()
    counter = iter(range(1000))
    p = Provisioner(
        management,  # type: ignore[arg-type]
        fake_redis,  # type: ignore[arg-type]
        Endpoints.from_settings(Settings()),
        password=lambda: f"generated-secret-{next(counter)}",
    )
    return p, management, fake_redis


def test_limits_and_topic_restrictions_come_before_permissions(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG")
    p, management, fake_redis = _fake_provisioner()
    plan = build_plan(SCOPE, TOPOLOGY, roles_for(["team.alpha"]))
    report = p.provision(plan)  # type: ignore[attr-defined]
    user = SCOPE.user(ALPHA)
    mine = [name for name, args in management.calls if user in args[:2]]
    steps = [n for n in mine if n.startswith("put_")]
    first_topic = steps.index("put_topic_permission")
    assert steps.index("put_user") < steps.index("put_user_limit") < first_topic
    assert first_topic < steps.index("put_permissions")
    setuser = [c for c in fake_redis.commands if c[:3] == ("ACL", "SETUSER", user)]
    assert setuser[0][3:5] == ("reset", "on") and setuser[0][5].startswith(">generated-secret-")
    assert ("ACL", "SETUSER", "default", "off") not in fake_redis.commands
    assert all(r.status == "created" for r in report.results)
    assert "generated-secret" not in caplog.text

    again = p.provision(plan, redis_default_off=True)  # type: ignore[attr-defined]
    assert {r.status for r in again.results} == {"kept"} and not again.credentials()
    kept = [c for c in fake_redis.commands if c[:3] == ("ACL", "SETUSER", user)][-1]
    assert not any(part.startswith(">") for part in kept) and "reset" not in kept
    assert fake_redis.commands[-1] == ("ACL", "SETUSER", "default", "off")


def test_the_operator_comes_first_then_guest_and_redis_default_go_last() -> None:
    p, management, fake_redis = _fake_provisioner()
    management.users_["guest"] = {"name": "guest", "tags": ["administrator"], "password_hash": "x"}
    plan = build_plan(SCOPE, TOPOLOGY, roles_for(["team.alpha"]))
    report = p.provision(  # type: ignore[attr-defined]
        plan, operator="op", guest="guest", redis_default_off=True
    )
    assert management.calls[-1] == ("put_user", ("guest", None, ("administrator",)))
    assert fake_redis.commands[-1] == ("ACL", "SETUSER", "default", "off")
    made = [c for c in management.calls if c[0] == "put_user" and c[1][0] == "op"]
    assert made and made[0][1][2] == ("administrator", "mesh-access")
    (op_acl,) = [c for c in fake_redis.commands if c[:3] == ("ACL", "SETUSER", "op")]
    assert op_acl[3:5] == ("reset", "on") and "+acl" in op_acl and "+script|kill" in op_acl
    assert not any(part.startswith("~") or part == "allkeys" for part in op_acl), "no keys"
    assert report.guest == ("guest", "switched off") and report.redis_default == "switched off"
    assert report.operator.credentials.redis_url.startswith("redis://op:generated-secret-")
    mgmt_url = report.operator.credentials.management_url
    assert mgmt_url.startswith("http://op:generated-secret-") and mgmt_url.endswith(":15672/")

    again = p.provision(plan, operator="op", guest="guest", redis_default_off=True)  # type: ignore[attr-defined]
    assert again.guest == ("guest", "already off") and again.redis_default == "already off"
    assert again.operator.broker == "kept" and again.operator.credentials is None


def test_a_scope_whose_keys_other_provisioned_users_reach_is_refused() -> None:
    from mesh.errors import TenantConflict

    p, management, fake_redis = _fake_provisioner()
    other = AccessScope(NS, prefix="legacy:")
    user = other.user(Role("router"))
    management.users_[user] = {"name": user, "tags": ["mesh-access"]}
    # a router provisioned under another prefix (or before the vhost was in the keys)
    fake_redis.acl_list = [f"user {user} on #ab ~{NS}:task:* resetchannels -@all".encode()]
    plan = build_plan(SCOPE, TOPOLOGY, roles_for())
    with pytest.raises(TenantConflict, match=user):
        p.provision(plan)  # type: ignore[attr-defined]
    assert not [c for c in management.calls if c[0].startswith("put_")], "nothing changed"
    # the same user is no conflict for a tenant in another vhost
    tenant = build_plan(AccessScope(NS, "t1"), TOPOLOGY, roles_for())
    assert p.provision(tenant, create_vhost=True).results  # type: ignore[attr-defined]


def test_every_node_of_a_cluster_url_gets_the_roles_login() -> None:
    settings = Settings(amqp_url="amqp://op:x@n1:5672/,amqp://op:x@n2:5673/t1")
    ends = Endpoints.from_settings(settings)
    assert vhost_of(settings) == "/"
    url = ends.amqp_url("mesh:router", "pw", "tenant/1")
    assert url == (
        "amqp://mesh%3Arouter:pw@n1:5672/tenant%2F1,amqp://mesh%3Arouter:pw@n2:5673/tenant%2F1"
    )
