"""Bad input: thousands of malformed bodies straight into ingress; the router answers each
readable reply_to with the bad fields named and dead-letters every raw body."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aio_pika
import pytest
from hypothesis import HealthCheck, Phase, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.schemas import Result, decode
from mesh.schemas.codec import peek
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BODIES = 2_000
ODD = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=40
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=False), ODD
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(ODD, inner, max_size=3),
    max_leaves=8,
)

#: each one makes an otherwise valid envelope invalid
BREAKERS: list[st.SearchStrategy[tuple[str, Any]]] = [
    st.tuples(st.just("drop"), st.just("capability")),
    st.tuples(st.just("set:capability"), st.one_of(st.integers(), st.just(""), st.lists(ODD))),
    st.tuples(st.just("set:priority"), st.one_of(st.integers(11, 10**6), st.integers(-99, 0), ODD)),
    st.tuples(st.just("set:timeout_ms"), st.one_of(st.integers(-5, 99), st.floats(0.1, 0.9))),
    st.tuples(st.just("set:payload"), st.one_of(st.lists(SCALARS), ODD, st.integers())),
    st.tuples(st.just("set:task_id"), ODD.filter(lambda s: not s.isascii() or " " in s)),
    st.tuples(st.just("set:hops"), st.integers(-(10**6), -1)),
    st.tuples(st.just("set:max_hops"), st.integers(21, 10**9)),
    st.tuples(st.just("set:required_tags"), st.lists(SCALARS, min_size=1)),
    st.tuples(st.just("extra"), ODD.filter(lambda k: k not in _FIELDS)),
    st.tuples(st.just("huge"), st.integers(5_000, 12_000)),
    st.tuples(st.just("truncate"), st.integers(1, 30)),
    st.tuples(st.just("not_object"), JSONISH.filter(lambda v: not isinstance(v, dict))),
    st.tuples(st.just("garbage"), st.binary(min_size=1, max_size=64)),
]
_FIELDS = {
    "task_id",
    "trace_id",
    "parent_task_id",
    "capability",
    "payload",
    "context_ref",
    "priority",
    "timeout_ms",
    "deadline_ms",
    "reply_to",
    "max_hops",
    "hops",
    "required_tags",
    "target",
    "source",
    "tags",
    "schema_version",
    "created_ms",
    "attempt",
    "reroutes",
    "excluded_agents",
    "trajectory",
}


def dumps(value: Any) -> bytes:
    """Test-side JSON: stdlib, so it can write what orjson refuses (ints past 64 bits)."""
    return json.dumps(value, ensure_ascii=False).encode()


def _body(base: dict[str, Any], mutations: list[tuple[str, Any]], extra_value: Any) -> bytes:
    data = dict(base)
    tail: tuple[str, Any] | None = None
    for kind, value in mutations:
        if kind == "drop":
            data.pop(value, None)
        elif kind.startswith("set:"):
            data[kind[4:]] = value
        elif kind == "extra":
            data[value] = extra_value
        elif kind == "huge":
            data["payload"] = {"blob": "é" * value}
        else:
            tail = (kind, value)
    if tail is None:
        return dumps(data)
    kind, value = tail
    if kind == "truncate":
        raw = dumps(data)
        return raw[: max(1, len(raw) - value)]
    if kind == "not_object":
        return dumps(value)
    return bytes(value) + b"\xff{"


def collect_bodies(reply_to: str) -> list[bytes]:
    bodies: list[bytes] = []

    @hsettings(
        max_examples=BODIES,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        task_id=st.uuids().map(lambda u: u.hex),
        with_reply=st.booleans(),
        capability=ODD,
        mutations=st.lists(st.one_of(*BREAKERS), min_size=1, max_size=3),
        extra_value=JSONISH,
    )
    def gather(
        task_id: str,
        with_reply: bool,
        capability: str,
        mutations: list[tuple[str, Any]],
        extra_value: Any,
    ) -> None:
        base: dict[str, Any] = {"task_id": task_id, "capability": capability}
        if with_reply:
            base["reply_to"] = reply_to
        bodies.append(_body(base, mutations, extra_value))

    gather()
    return bodies


@pytest.fixture
def settings(namespace: str) -> Settings:
    return Settings.from_env(namespace=namespace, max_payload_bytes=4096, prefetch=256)


@pytest.mark.access_off(
    "a server-named reply queue; with it on a caller replies into a queue of its own user"
)
async def test_malformed_bodies_are_answered_and_dead_lettered(
    conn: MeshConnection, add_cleanup: Any, caplog: pytest.LogCaptureFixture
) -> None:
    router = await start_router(conn, add_cleanup)
    channel = await conn.channel()
    reply = await channel.declare_queue(exclusive=True)
    bodies = await asyncio.to_thread(collect_bodies, reply.name)
    assert len(bodies) >= BODIES
    expect_replies = sum(1 for b in bodies if peek(b, "reply_to") == reply.name)
    assert expect_replies > BODIES // 4
    answers: list[Result] = []

    async def on_reply(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        answers.append(decode(Result, message.body))

    await reply.consume(on_reply, no_ack=True)
    ingress = await channel.get_exchange(conn.topology.ingress, ensure=False)
    started = asyncio.get_running_loop().time()
    with caplog.at_level(logging.CRITICAL, logger="mesh"):
        await asyncio.gather(
            *(
                ingress.publish(aio_pika.Message(body), routing_key=conn.topology.ingress_key)
                for body in bodies
            )
        )
        await wait_until(lambda: router.handled >= len(bodies), timeout=60)
        await wait_until(lambda: len(answers) >= expect_replies, timeout=20)
    took = asyncio.get_running_loop().time() - started
    assert not [r for r in caplog.records if r.levelno >= logging.CRITICAL]
    assert len(answers) == expect_replies
    for answer in answers:
        assert answer.status == "failed"
        assert answer.error is not None and answer.error.code == "invalid_envelope"
        problems = answer.error.details["errors"]
        assert problems and all(p["loc"] and p["msg"] for p in problems)
    dead = await channel.declare_queue(conn.topology.dead_queue("invalid"), passive=True)
    await wait_until(
        lambda: _count(conn, conn.topology.dead_queue("invalid"), len(bodies)), timeout=10
    )
    sample = await dead.get(no_ack=True)
    assert sample.headers["x-mesh-reason"] == "invalid" and sample.body in set(bodies)
    print(f"{len(bodies)} malformed bodies handled in {took:.2f}s; {len(answers)} answered")


async def _count(conn: MeshConnection, name: str, expected: int) -> bool:
    channel = await conn.channel()
    try:
        queue = await channel.declare_queue(name, passive=True)
        count = queue.declaration_result.message_count or 0
        assert count <= expected, f"{count} dead letters for {expected} bodies"
        return count == expected
    finally:
        await channel.close()
