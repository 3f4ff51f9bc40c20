"""The mesh's Lua runs as Redis functions only: every script is in a library provisioning
loads, each body verbatim; no role's command list lets it run code of its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mesh.access.provision import LIBRARIES, OPERATOR_REDIS_RULES
from mesh.access.roles import RoleKind, redis_acl
from mesh.dispatch import lua
from mesh.functions import LIBRARY_PREFIX, Library
from mesh.redis_pool import RedisBusy, register_busy_reply
from mesh.retrying import REDIS_FAILURES, TRANSIENT_ERRORS

MESH = Path(__file__).resolve().parents[2] / "mesh"
#: how code reaches Redis as a script other than through `mesh.functions`
SCRIPT_CALLS = re.compile(r"register_script\(|\.eval\(|\.evalsha\(|script_load\(|\"EVAL")


def test_no_module_of_the_mesh_sends_a_script_of_its_own() -> None:
    offenders = [
        f"{path.relative_to(MESH)}:{n}"
        for path in MESH.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if SCRIPT_CALLS.search(line)
    ]
    assert offenders == []


def test_provisioning_loads_every_library_the_mesh_defines() -> None:
    defined = sum(path.read_text().count("Library.of(") for path in MESH.rglob("*.py"))
    assert len(LIBRARIES) == defined == 5
    assert len({lib.label for lib in LIBRARIES}) == len(LIBRARIES)
    names = [lib.function_name(s) for lib in LIBRARIES for s, _ in lib.scripts]
    assert len(set(names)) == len(names)
    assert all(re.fullmatch(r"[A-Za-z0-9_]+", n) for n in names), "Redis' function names"
    assert {s for s, _ in lua.LIBRARY.scripts} == {
        "advance",
        "submit",
        "claim",
        "finish",
        "seed",
        "relay",
        "release",
        "apply_once",
    }


def test_each_body_is_registered_verbatim_with_keys_and_argv_as_under_eval() -> None:
    for library in LIBRARIES:
        code = library.code
        assert code.startswith(f"#!lua name={library.name}\n")
        for script, body in library.scripts:
            wrapped = (
                f"redis.register_function('{library.function_name(script)}', "
                f"function(KEYS, ARGV)\n{body}\nend)\n"
            )
            assert wrapped in code, (library.label, script)
    assert lua.LIBRARY.scripts[0] == ("advance", lua.ADVANCE)


def test_a_library_is_named_by_a_digest_of_its_bodies() -> None:
    one = Library.of("x", a="return 1")
    assert one.name == Library.of("x", a="return 1").name
    assert one.name.startswith(LIBRARY_PREFIX + "x_")
    assert one.name != Library.of("x", a="return 2").name  # new code: a new library
    assert one.name != Library.of("y", a="return 1").name
    with pytest.raises(KeyError):
        one.function_name("b")


FUNCTION_ROLES: list[tuple[RoleKind, str]] = [
    ("router", ""),
    ("registry", ""),
    ("worker", "pay.ments"),
    ("admin", ""),
]


@pytest.mark.parametrize(("kind", "name"), FUNCTION_ROLES)
def test_roles_get_fcall_and_no_eval_script_function_scan_or_select(
    kind: RoleKind, name: str
) -> None:
    commands = redis_acl(kind, "acme.prod", name).commands
    assert redis_acl(kind, "acme.prod", name).scripting
    at = commands.index
    # categories first, then what they must not bring, then the two calls they may make
    assert at("-@all") == 0
    assert max(at("+@read"), at("+@write"), at("+@connection")) < at("-@dangerous")
    assert at("+@write") < at("-@scripting") < at("+fcall") and "+fcall_ro" in commands
    for denied in ("-scan", "-randomkey", "-select", "-move"):
        assert at("+@connection") < at(denied) < at("+fcall"), denied
    allowed = {c for c in commands if c.startswith("+")}
    assert allowed == {"+@read", "+@write", "+@connection", "+@transaction", "+time"} | {
        "+fcall",
        "+fcall_ro",
    }


@pytest.mark.parametrize("kind", ["observer", "client"])
def test_readers_get_no_function_call(kind: RoleKind) -> None:
    acl = redis_acl(kind, "acme.prod", "o")
    assert not acl.scripting and not any("fcall" in c or "eval" in c for c in acl.commands)


def test_the_operator_may_load_and_kill_functions_and_call_none() -> None:
    rules = OPERATOR_REDIS_RULES
    assert "+function|load" in rules and "+function|kill" in rules and "+script|kill" in rules
    assert not any(r in rules for r in ("+fcall", "+eval", "+@scripting", "+@all"))
    assert not any(r.startswith(("~", "%")) or r == "allkeys" for r in rules)


def test_busy_and_loading_answers_are_transient_and_every_redis_error_a_failure() -> None:
    from redis._parsers.base import BaseParser
    from redis.exceptions import BusyLoadingError, ResponseError

    register_busy_reply()
    busy = BaseParser.parse_error("BUSY Redis is busy running a script. You can only call")
    assert isinstance(busy, RedisBusy) and isinstance(busy, TRANSIENT_ERRORS)
    loading = BaseParser.parse_error("LOADING Redis is loading the dataset in memory")
    assert isinstance(loading, BusyLoadingError) and isinstance(loading, TRANSIENT_ERRORS)
    oom = BaseParser.parse_error("OOM command not allowed when used memory > 'maxmemory'.")
    assert not isinstance(oom, TRANSIENT_ERRORS) and isinstance(oom, REDIS_FAILURES)
    assert isinstance(ResponseError("WRONGTYPE"), REDIS_FAILURES)
