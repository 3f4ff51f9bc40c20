"""The tenant (vhost and namespace) is part of every Redis key, and two tenants never meet.

Keys of the default vhost are what they always were; any other vhost puts its %-encoded
name in front (`mesh.keys.tenant_prefix`). The Redis ACLs of `mesh.access.roles` name the
same prefix, so a role of one tenant matches no key of another.
"""

from __future__ import annotations

import fnmatch
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesh.access.provision import _pattern_reach
from mesh.access.roles import AccessScope, Role, build_plan, redis_acl, roles_for
from mesh.errors import ConfigError
from mesh.keys import Keys, tenant_prefix
from mesh.topology import Topology

NAMESPACES = st.from_regex(r"[a-z][a-z0-9_.-]{0,12}", fullmatch=True)
#: vhosts may hold anything RabbitMQ takes, glob characters, ':' and '/' included
VHOSTS = st.one_of(
    st.just("/"),
    st.text(string.printable.strip() + "é", min_size=1, max_size=12),
)


def test_keys_of_the_default_vhost_are_unchanged() -> None:
    assert Keys("mesh").task("t1") == "mesh:task:t1"
    assert Keys("mesh", "/").sealed("a", "t") == "mesh:sealed:a/t"
    assert Keys("mesh").pattern() == "mesh:*"


def test_another_vhost_puts_its_encoded_name_in_front() -> None:
    assert Keys("mesh", "tenant1").task("t1") == "tenant1/mesh:task:t1"
    assert Keys("mesh", "a/b:*").pattern() == "a%2Fb%3A%2A/mesh:*"
    assert Keys("mesh", "tenant1") != Keys("mesh", "tenant2")


@pytest.mark.parametrize("namespace", ["", "Mesh", "a:b", "a/b", "a*", "1x"])
def test_a_namespace_settings_would_refuse_is_refused(namespace: str) -> None:
    with pytest.raises(ConfigError, match="MESH_NAMESPACE"):
        Keys(namespace)


def test_an_empty_vhost_is_refused() -> None:
    with pytest.raises(ConfigError, match="vhost"):
        tenant_prefix("mesh", "")


@given(NAMESPACES, VHOSTS, NAMESPACES, VHOSTS)
def test_no_key_of_one_tenant_matches_the_pattern_of_another(
    ns_a: str, vhost_a: str, ns_b: str, vhost_b: str
) -> None:
    a, b = Keys(ns_a, vhost_a), Keys(ns_b, vhost_b)
    key = a.task("x")
    # the prefix holds no glob character, so fnmatch's reading is Redis' here
    assert fnmatch.fnmatchcase(key, a.pattern())
    if (ns_a, vhost_a) != (ns_b, vhost_b):
        assert a.prefix != b.prefix
        assert not fnmatch.fnmatchcase(key, b.pattern())
        assert not fnmatch.fnmatchcase(b.context("t", 1), a.pattern())


@given(NAMESPACES, VHOSTS)
def test_every_acl_key_pattern_of_a_tenant_starts_with_its_prefix(ns: str, vhost: str) -> None:
    ours = Keys(ns, vhost).prefix + ":"
    for kind in ("admin", "router", "registry", "worker", "observer"):
        acl = redis_acl(kind, ns, "agent.x", vhost)
        assert acl.keys
        for rule in acl.keys:
            reach = _pattern_reach(rule)
            assert reach is not None and reach.startswith(ours), (kind, rule)


def test_grants_of_a_scope_use_its_vhost_in_their_redis_patterns() -> None:
    scope = AccessScope("acme", "t1")
    plan = build_plan(scope, Topology(namespace="acme"), roles_for(["pay"], [], ["ops"]))
    assert "~t1/acme:agent/pay/:*" in plan.grant(Role("worker", "pay")).redis.keys
    assert "~t1/acme:agent/*" in plan.grant(Role("router")).redis.keys
    assert "~t1/acme:sealed:pay/*" in plan.grant(Role("worker", "pay")).redis.keys
    assert "%R~t1/acme:task:*" in plan.grant(Role("observer", "ops")).redis.keys
    assert plan.grant(Role("admin")).redis.keys == ("~t1/acme:*",)


@pytest.mark.parametrize(
    ("rule", "reach"),
    [
        ("~mesh:task:*", "mesh:task:"),
        ("%R~t1/mesh:*", "t1/mesh:"),
        ("%RW~a\\*b*", "a*b"),
        ("~exact", "exact"),
        ("allkeys", ""),
        ("~*", ""),
        ("+@all", None),
        ("resetchannels", None),
        ("&chan", None),
    ],
)
def test_the_literal_reach_of_an_acl_rule(rule: str, reach: str | None) -> None:
    assert _pattern_reach(rule) == reach
