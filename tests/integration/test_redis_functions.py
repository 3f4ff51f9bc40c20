"""The mesh's Redis functions on a real Redis 7: FCALL answers as EVAL did, a missing
library is loaded (or named, for a login that may not load it), and the roles' command
lists allow the mesh's functions and refuse code of their own."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as redis_asyncio

from mesh.access.provision import LIBRARIES, OPERATOR_REDIS_RULES
from mesh.access.roles import RoleKind, redis_acl
from mesh.connection import MeshConnection
from mesh.dispatch import lua
from mesh.errors import RedisFunctionsMissing
from mesh.functions import CallBatch, Library
from mesh.keys import Keys
from mesh.router import memory
from tests.conftest import pipelines_counted

pytestmark = pytest.mark.integration

Step = tuple[str, Callable[[Keys], list[str]], list[Any]]


@pytest.fixture
async def scratch(conn: MeshConnection) -> AsyncIterator[Callable[[], Library]]:
    """Libraries of this test only (the mesh's own stay loaded for everyone else)."""
    made: list[Library] = []

    def make() -> Library:
        library = Library.of(
            f"test_{uuid.uuid4().hex[:8]}",
            echo="return ARGV[1]",
            incr="return redis.call('INCR', KEYS[1])",
        )
        made.append(library)
        return library

    yield make
    for library in made:
        with contextlib.suppress(redis_asyncio.ResponseError):  # never loaded
            await conn.redis.function_delete(library.name)


@pytest.fixture
async def acl_user(conn: MeshConnection) -> AsyncIterator[Callable[..., Any]]:
    """``ACL SETUSER`` of a user of this test with the given rules; a client logged in as it."""
    users: list[str] = []
    clients: list[redis_asyncio.Redis] = []

    async def make(*rules: str) -> tuple[str, redis_asyncio.Redis]:
        user, password = f"test-fn-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
        await conn.redis.execute_command(
            "ACL", "SETUSER", user, "reset", "on", f">{password}", *rules
        )
        users.append(user)
        client = redis_asyncio.Redis(username=user, password=password)
        clients.append(client)
        return user, client

    yield make
    for client in clients:
        await client.aclose()
    for user in users:
        await conn.redis.acl_deluser(user)


async def test_a_missing_library_is_loaded_on_first_call_then_called(
    conn: MeshConnection, scratch: Callable[[], Library]
) -> None:
    library = scratch()
    assert not await conn.redis.function_list(library=library.name)
    assert await library.bind(conn.redis, "echo")(args=["hi"]) == b"hi"
    (listed,) = await conn.redis.function_list(library=library.name)
    fields = dict(zip(listed[::2], listed[1::2], strict=True))  # RESP2: a flat list
    assert fields[b"library_name"] == library.name.encode()
    key = conn.keys.side_effect(uuid.uuid4().hex)
    assert await library.bind(conn.redis, "incr")(keys=[key]) == 1


async def test_pipelined_calls_load_a_missing_library_and_run_once(
    conn: MeshConnection, scratch: Callable[[], Library]
) -> None:
    library = scratch()
    incr = library.bind(conn.redis, "incr")
    key = conn.keys.side_effect(uuid.uuid4().hex)

    def fill(pipe: Any) -> None:
        for _ in range(3):
            incr.queue(pipe, [key])

    # the first pipeline fails whole (no function yet), so the counter counts 3, not 4+
    assert await incr.pipelined(fill) == [1, 2, 3]
    assert await incr.pipelined(fill) == [4, 5, 6]


async def test_batched_calls_of_one_loop_turn_go_in_one_pipeline_each_with_its_answer(
    conn: MeshConnection, scratch: Callable[[], Library]
) -> None:
    library = scratch()
    echo, incr = (library.bind(conn.redis, s, batched=True) for s in ("echo", "incr"))
    counter, text = conn.keys.side_effect(uuid.uuid4().hex), conn.keys.side_effect(uuid.uuid4().hex)
    await conn.redis.set(text, "not a number")
    # a missing library: every call of the batch is told, each loads it and calls again
    assert await asyncio.gather(echo(args=["a"]), incr(keys=[counter])) == [b"a", 1]
    with pipelines_counted(conn.redis) as pipelines:
        answers = await asyncio.gather(
            incr(keys=[counter]),
            echo(args=["b"]),
            incr(keys=[text]),
            incr(keys=[counter]),
            return_exceptions=True,
        )
        assert await echo(args=["alone"]) == b"alone"  # a lone call: a plain FCALL
    assert pipelines.n == 1
    assert answers[:2] == [2, b"b"] and answers[3] == 3
    assert isinstance(answers[2], redis_asyncio.ResponseError)


async def test_calls_made_while_a_batch_is_out_go_together_in_the_next(
    conn: MeshConnection, scratch: Callable[[], Library]
) -> None:
    library = scratch()
    await library.load(conn.redis)
    incr = library.bind(conn.redis, "incr", batched=True)
    counter = conn.keys.side_effect(uuid.uuid4().hex)
    batch = CallBatch.of(conn.redis)
    before = (batch.batches, batch.calls)
    gate, held = asyncio.Event(), asyncio.Event()
    fcall = conn.redis.fcall

    async def held_fcall(*args: Any) -> Any:  # the first (lone) call stays out until let go
        held.set()
        await gate.wait()
        return await fcall(*args)

    conn.redis.fcall = held_fcall
    try:
        first = asyncio.ensure_future(incr(keys=[counter]))
        await held.wait()
        later = []
        for _ in range(3):  # each in a turn of its own
            later.append(asyncio.ensure_future(incr(keys=[counter])))
            await asyncio.sleep(0)
        assert (batch.batches, batch.calls) == (before[0] + 1, before[1] + 1)
        gate.set()
        assert await first == 1
        assert sorted(await asyncio.gather(*later)) == [2, 3, 4]
    finally:
        del conn.redis.fcall
    assert (batch.batches, batch.calls) == (before[0] + 2, before[1] + 4)


async def test_a_login_that_may_not_load_is_told_to_provision(
    conn: MeshConnection, scratch: Callable[[], Library], acl_user: Callable[..., Any]
) -> None:
    library = scratch()
    worker = redis_acl("worker", conn.settings.namespace, "a")
    _, client = await acl_user(*worker.rules)
    with pytest.raises(RedisFunctionsMissing) as info:
        await library.bind(client, "echo")(args=["x"])
    assert info.value.library == library.name and "mesh access provision" in str(info.value)
    await library.load(conn.redis)  # what provisioning does
    assert await library.bind(client, "echo")(args=["x"]) == b"x"


def _dispatch_steps(k: Keys) -> list[Step]:
    """Submit, duplicate, claim, side effect (twice), commit, late claim, a refused move,
    a seed, a stale release, a submission seeded, a foreign and an unsealed relay: each
    answer of the dispatch's scripts, one after the other."""
    ttl, me, far = 60_000, "a-1", 9_999_999_999_999
    prefix = k.instance_prefix()

    def submit(kk: Keys) -> list[str]:
        return [
            kk.task("t1"),
            kk.task_history("t1"),
            kk.task_waiters("t1"),
            kk.idem("t1"),
            kk.trace_owner("tr1"),
            kk.task(""),
            kk.dispatched_to(""),
        ]

    def claim(kk: Keys) -> list[str]:
        return [
            kk.idem("t1"),
            kk.task("t1"),
            kk.task_history("t1"),
            kk.processing(),
            kk.trace_visits("tr1"),
        ]

    def effect(kk: Keys) -> list[str]:
        return [kk.idem("t1"), kk.effect_done("t1", "n"), kk.side_effect("n"), kk.task("t1")]

    def finish(kk: Keys) -> list[str]:
        return [
            kk.idem("t1"),
            kk.task("t1"),
            kk.task_history("t1"),
            kk.task_waiters("t1"),
            kk.processing(),
        ]

    route = ["submitted", "routing", "dispatched"]
    new = [ttl, "router", "reply.q", "0", "tr1", "a", "0", "", "", "", ttl, *route]
    again = [ttl, "router", "reply.q2", "1", "tr1", "a", "0", "", "", "", ttl, *route]
    seeded = [ttl, "router", "reply.q", "0", "tr4", "a", "0", "", "", far, ttl, *route]

    def submit_seeded(kk: Keys) -> list[str]:
        return [
            kk.task("t4"),
            kk.task_history("t4"),
            kk.task_waiters("t4"),
            kk.idem("t4"),
            kk.trace_owner("tr4"),
            kk.task(""),
            kk.dispatched_to(""),
            kk.dispatched_to("t4"),
            kk.for_agent("a").task("t4"),
            kk.processing(),
        ]

    def relay(kk: Keys) -> list[str]:
        return [
            kk.dispatched_to("t4"),
            kk.idem("t4"),
            kk.task("t4"),
            kk.task_history("t4"),
            kk.task_waiters("t4"),
            kk.processing(),
        ]

    claim_args = [ttl, prefix, me, 7, "0", "0", far, "a", "1", "1", "tr1"]
    effect_args = [ttl, prefix, me, 7, "0", 5]
    result = '{"task_id":"t1"}'
    finish_args = [ttl, prefix, me, 7, "0", result, me, "", "a", "0", "completed"]
    return [
        ("submit", submit, new),
        ("submit", submit, again),
        ("claim", claim, claim_args),
        ("apply_once", effect, effect_args),
        ("apply_once", effect, effect_args),
        ("finish", finish, finish_args),
        ("claim", claim, claim_args),
        ("advance", lambda kk: [kk.task("t2"), kk.task_history("t2")], [ttl, "x", "", "", "new"]),
        ("advance", lambda kk: [kk.task("t2"), kk.task_history("t2")], [ttl, "x", "", "", "nope"]),
        (
            "seed",
            lambda kk: [
                kk.dispatched_to("t3"),
                kk.for_agent("a").task("t3"),
                kk.task("t3"),
                kk.processing(),
            ],
            [ttl, "a", "tr3", far],
        ),
        (
            "release",
            lambda kk: [kk.idem("t1"), kk.task("t1"), kk.task_history("t1"), kk.processing()],
            [ttl, "someone-else", 1, "x", "", "queued"],
        ),
        ("submit", submit_seeded, seeded),
        ("relay", relay, [ttl, "b", "t4", "router", "from agent b", k.sealed("b", "t4")]),
        ("relay", relay, [ttl, "a", "t4", "router", "from agent a", k.sealed("a", "t4")]),
    ]


def _without_times(raw: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {f: v for f, v in raw.items() if not f.endswith(b"_ms")}


async def test_every_dispatch_function_answers_as_its_eval_body_did(conn: MeshConnection) -> None:
    bodies = dict(lua.LIBRARY.scripts)
    by_eval, by_fcall = conn.keys.for_agent("by-eval"), conn.keys.for_agent("by-fcall")
    for name, keys_of, args in _dispatch_steps(conn.keys):
        keys_e, keys_f = keys_of(by_eval), keys_of(by_fcall)
        answer_e = await conn.redis.eval(bodies[name], len(keys_e), *keys_e, *args)
        answer_f = await lua.LIBRARY.bind(conn.redis, name)(keys=keys_f, args=args)
        assert answer_f == answer_e, (name, args)
    for task_id in ("t1", "t2", "t3", "t4"):
        for family in (by_eval.task, by_eval.idem):
            other = by_fcall.task if family == by_eval.task else by_fcall.idem
            mine = _without_times(await conn.redis.hgetall(family(task_id)))
            theirs = _without_times(await conn.redis.hgetall(other(task_id)))
            assert mine == theirs, task_id
    history = await conn.redis.lrange(by_fcall.task_history("t1"), 0, -1)
    assert len(history) == 6  # submitted, routing, dispatched, accepted, processing, completed


async def test_the_memory_function_answers_as_its_eval_body_did(conn: MeshConnection) -> None:
    (body,) = (b for n, b in memory.LIBRARY.scripts if n == "record")
    for n in range(4):
        args = ["completed", f"text {n % 3}", 2, 60, 12345 + n, ""]
        answers = []
        for who in ("by-eval", "by-fcall"):
            k = conn.keys.for_agent(who)
            keys = [
                k.memory("a"),
                k.stats("a"),
                k.memory_marker("a", f"t{n}"),
                k.memory_marker("a", "x"),
            ]
            if who == "by-eval":
                answers.append(await conn.redis.eval(body, 4, *keys, *args))
            else:
                answers.append(await memory.LIBRARY.bind(conn.redis, "record")(keys, args))
        assert answers[0] == answers[1], n


#: what a role with functions may run, and what none may (ACL DRYRUN, keys of its own)
ALLOWED = [("PING",), ("TIME",), ("FCALL", "{fn}", "1", "{own}"), ("GET", "{own}")]
REFUSED = [
    ("EVAL", "return 1", "0"),
    ("EVALSHA", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", "0"),
    ("EVAL_RO", "return 1", "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("SCRIPT", "DEBUG", "YES"),
    ("SCRIPT", "FLUSH"),
    ("SCRIPT", "KILL"),
    ("FUNCTION", "LOAD", "x"),
    ("FUNCTION", "DELETE", "x"),
    ("FUNCTION", "FLUSH"),
    ("FUNCTION", "KILL"),
    ("SCAN", "0"),
    ("KEYS", "*"),
    ("RANDOMKEY",),
    ("DBSIZE",),
    ("SELECT", "1"),
    ("MOVE", "{own}", "1"),
    ("SWAPDB", "0", "1"),
    ("FLUSHDB",),
    ("CONFIG", "GET", "maxmemory"),
    ("DEBUG", "SLEEP", "1"),
    ("CLIENT", "KILL", "ID", "1"),
    ("MONITOR",),
]


async def _dryrun(conn: MeshConnection, user: str, command: tuple[str, ...], **fill: str) -> bool:
    words = [w.format(**fill) for w in command]
    return await conn.redis.execute_command("ACL", "DRYRUN", user, *words) == b"OK"


@pytest.mark.parametrize("kind", ["router", "registry", "worker", "admin"])
async def test_roles_call_the_mesh_functions_and_run_no_code_of_their_own(
    conn: MeshConnection, acl_user: Callable[..., Any], kind: RoleKind
) -> None:
    ns = conn.settings.namespace
    acl = redis_acl(kind, ns, "a" if kind == "worker" else "")
    user, _ = await acl_user(*acl.rules)
    k = Keys(ns)
    own = {
        "router": k.idem("t"),
        "registry": k.fence("a"),
        "worker": k.for_agent("a").task("t"),
        "admin": k.task("t"),
    }[kind]
    fill = {"own": own, "fn": lua.LIBRARY.function_name("advance")}
    for command in ALLOWED:
        assert await _dryrun(conn, user, command, **fill), (kind, command)
    for command in REFUSED:
        assert not await _dryrun(conn, user, command, **fill), (kind, command)


@pytest.mark.parametrize("kind", ["observer", "client"])
async def test_readers_run_no_function_at_all(
    conn: MeshConnection, acl_user: Callable[..., Any], kind: RoleKind
) -> None:
    user, _ = await acl_user(*redis_acl(kind, conn.settings.namespace, "o").rules)
    fill = {"own": Keys(conn.settings.namespace).trace("t"), "fn": "x"}
    for command in [("FCALL", "{fn}", "0"), ("FCALL_RO", "{fn}", "0"), *REFUSED]:
        assert not await _dryrun(conn, user, command, **fill), (kind, command)
    assert await _dryrun(conn, user, ("PING",))


async def test_the_operator_loads_the_functions_and_touches_no_key(
    conn: MeshConnection, acl_user: Callable[..., Any]
) -> None:
    user, client = await acl_user(*OPERATOR_REDIS_RULES)
    for library in LIBRARIES:
        await library.load(client)  # re-loading the same code changes nothing
    fill = {"own": conn.keys.task("t"), "fn": lua.LIBRARY.function_name("advance")}
    assert await _dryrun(conn, user, ("FUNCTION", "KILL"))
    assert await _dryrun(conn, user, ("SCRIPT", "KILL"))
    for command in [("GET", "{own}"), ("FCALL", "{fn}", "1", "{own}"), ("EVAL", "return 1", "0")]:
        assert not await _dryrun(conn, user, command, **fill), command
