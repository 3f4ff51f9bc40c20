"""What the observer and the clients may do, tried with each role's own provisioned login
(access control, second round, point 6): the observer reads only what it shows (no
Results, contexts, waiters or request texts) and still keeps its traces; a client whose
name extends another's by a dot (``web.eu`` of ``web``) shares none of its reply queues;
and the provisioned ACLs are what the README's table of roles says."""

from __future__ import annotations

import asyncio
import itertools
import re
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import NoPermissionError

from mesh import MeshClient
from mesh.access.provision import Credentials
from mesh.access.roles import Role
from mesh.keys import Keys
from mesh.messaging import Publisher
from mesh.observer import Observer
from mesh.observer.store import TraceStore
from mesh.router.plan import publish_decision
from mesh.schemas import Event, TaskEnvelope
from tests.conftest import wait_until
from tests.integration.access_kit import CLIENT, OBSERVER, Opener, Provisioned

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def login() -> AsyncIterator[Opener]:
    """Plain AMQP connections as a provisioned user (what an attacker opens by hand)."""
    async with AsyncExitStack() as stack:

        async def open_as(creds: Credentials) -> aio_pika.abc.AbstractConnection:
            conn = await aio_pika.connect(creds.amqp_url, timeout=5)
            stack.push_async_callback(conn.close)
            return conn

        yield open_as


@pytest.fixture
async def redis_login() -> AsyncIterator[Callable[[Credentials], redis_asyncio.Redis]]:
    clients: list[redis_asyncio.Redis] = []

    def open_as(creds: Credentials) -> redis_asyncio.Redis:
        client = redis_asyncio.Redis.from_url(creds.redis_url)
        clients.append(client)
        return client

    yield open_as
    for client in clients:
        await client.aclose()


async def _is(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer callback for consumes that are refused."""


async def test_the_observer_reads_what_it_shows_and_no_texts_results_or_contexts(
    mesh_access: Provisioned,
    as_user: Any,
    login: Opener,
    redis_login: Callable[[Credentials], redis_asyncio.Redis],
    add_cleanup: Any,
    tmp_path: Path,
) -> None:
    conn = await as_user(Role("observer", OBSERVER))
    conn.settings = conn.settings.model_copy(update={"observer_log_dir": tmp_path})
    observer = Observer(conn)
    await observer.start()  # declares and binds its own queue under the narrow grant
    add_cleanup(observer.close)
    assert observer.feed.disabled is None

    # legitimate traffic: a router's events of one trace, a decision among them
    router = Publisher(await as_user(Role("router")))
    await router.start()
    add_cleanup(router.close)
    trace = uuid.uuid4().hex
    envelope = TaskEnvelope(capability="refund order 123 of alice", trace_id=trace, task_id="t1")
    for kind in ("task.dispatched", "route.decision", "task.completed"):
        data = {"capability": "refund order 123 of alice"} if kind == "route.decision" else {}
        await router.emit(Event(type=kind, trace_id=trace, task_id="t1", data=data))
        if kind == "route.decision":  # what a router sends under access control: no text
            await publish_decision(router, envelope, None, {}, {"threshold": 0.5}, redact=True)
    store = TraceStore(conn.redis, conn.keys, conn.settings)

    async def stored() -> list[str]:
        # sorted: events of one millisecond tie in the trace's sorted set
        return sorted(e.type for e in await store.events(trace))

    # the queue is FIFO: the last event came after the full decision would have
    want = ["route.decision", "task.completed", "task.dispatched"]
    await wait_until(lambda: _is(stored(), want), timeout=10)
    assert observer.events == 3
    (decision,) = [e for e in await store.events(trace) if e.type == "route.decision"]
    assert "capability" not in decision.data and decision.data["capability_chars"] == 25
    assert decision.data["threshold"] == 0.5

    # the attacks, with the observer's own broker login
    creds = mesh_access.creds(Role("observer", OBSERVER))
    raw = await login(creds)
    topology = mesh_access.topology
    own = topology.observer_queue(mesh_access.user(Role("observer", OBSERVER)), "tap")
    for key in ("route.decision", "#", "route.#", "*.decision"):
        channel = await raw.channel()
        queue = await channel.declare_queue(own, exclusive=True, auto_delete=True)
        with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
            await queue.bind(topology.events, routing_key=key)
    channel = await raw.channel()
    queue = await channel.declare_queue(own, exclusive=True, auto_delete=True)
    await queue.bind(topology.events, routing_key="task.#")  # what it needs stays allowed

    # and with its own Redis login
    keys = Keys(mesh_access.scope.namespace, mesh_access.scope.vhost)
    admin = redis_login(mesh_access.creds(Role("admin")))
    await admin.hset(keys.idem("t1"), mapping={"result": "alice's result"})
    await admin.set(keys.context(trace, 1), "alice's context")
    await admin.hset(keys.task("t1"), mapping={"state": "completed"})
    redis = redis_login(creds)
    for attempt in (
        redis.hgetall(keys.idem("t1")),
        redis.get(keys.context(trace, 1)),
        redis.get(keys.context_version(trace)),
        redis.lrange(keys.task_waiters("t1"), 0, -1),
        redis.get(keys.sealed("team.alpha", "t1")),
        redis.hgetall(keys.memory("team.alpha")),
        redis.hgetall(keys.for_agent("team.alpha").task("t1")),
        redis.set(keys.task("t1"), "x"),
    ):
        with pytest.raises(NoPermissionError):
            await attempt
    assert await redis.hget(keys.task("t1"), "state") == b"completed"
    assert await redis.zcard(keys.trace(trace)) == 3
    assert await redis.smembers(keys.agents()) == set()


async def test_a_client_named_with_a_dot_after_another_shares_no_reply_queue(
    mesh_access: Provisioned, as_user: Any, login: Opener, add_cleanup: Any
) -> None:
    web_eu = Role("client", f"{CLIENT}.eu")
    theirs = MeshClient(await as_user(web_eu))
    await theirs.start()
    add_cleanup(theirs.close)
    mine = MeshClient(await as_user(Role("client", CLIENT)))
    await mine.start()  # the legitimate one beside it
    add_cleanup(mine.close)
    web_user, eu_user = mesh_access.user(Role("client", CLIENT)), mesh_access.user(web_eu)
    assert theirs.reply_to.startswith(mesh_access.topology.reply_queue(f"{web_user}."))

    raw = await login(mesh_access.creds(Role("client", CLIENT)))
    topology = mesh_access.topology
    channel = await raw.channel()
    queue = await channel.get_queue(theirs.reply_to, ensure=False)
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await queue.consume(_ignore)
    channel = await raw.channel()
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await channel.declare_queue(topology.reply_queue(f"{eu_user}.forged"), auto_delete=True)
    channel = await raw.channel()
    queue = await channel.get_queue(mine.reply_to, ensure=False)
    key = topology.reply_key(theirs.reply_to)
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await queue.bind(topology.replies, routing_key=key)
    # an id with a dot would be another user's name part: refused as well
    channel = await raw.channel()
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await channel.declare_queue(topology.reply_queue(f"{web_user}.eu.x"), auto_delete=True)
    # its own reply queues, by exact name, stay its own
    channel = await raw.channel()
    extra = await channel.declare_queue(topology.reply_queue(f"{web_user}.second"), exclusive=True)
    await extra.bind(topology.replies, routing_key=topology.reply_key(extra.name))


def _readme_roles() -> dict[str, dict[str, str]]:
    """The README's table of what each role may do (`## Security`), by role and column."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index("### What each role may do") :].splitlines()
    start = next(i for i, line in enumerate(section) if line.startswith("| "))
    lines = list(itertools.takewhile(lambda line: line.startswith("| "), section[start:]))
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    table: dict[str, dict[str, str]] = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        table[cells[0].strip("`")] = dict(zip(header, cells, strict=True))
    return table


def _families(cell: str) -> set[str]:
    """The key families a README cell names (``task:*``, ``agents``); none for ``none``."""
    return set(re.findall(r"`<ns>:([^`]+)`", cell))


#: event routing keys the table's "events" columns are checked on
EVENT_KEYS = ("task.completed", "agent.up", "alert.loop", "route.decision", "route.feedback")


def _listed(cell: str, key: str) -> bool:
    """Whether a binding pattern a README cell lists (``task.*``, ``#``) covers `key`."""
    for pattern in re.findall(r"`([a-z#*.]+)`", cell.split("(")[0]):
        regex = re.escape(pattern).replace(r"\#", ".*").replace(r"\*", "[^.]+")
        if re.fullmatch(regex, key):
            return True
    return False


async def test_the_provisioned_acls_are_the_readmes_table(mesh_access: Provisioned) -> None:
    table = _readme_roles()
    prefix = Keys(mesh_access.scope.namespace, mesh_access.scope.vhost).prefix
    events = mesh_access.topology.events
    vhost = mesh_access.scope.vhost
    operator = redis_asyncio.Redis.from_url(mesh_access.base_redis_url)
    checked = set()
    try:
        for grant in mesh_access.plan.grants:
            kind, name = grant.role.kind, grant.role.name
            row = table[kind if not name else f"{kind}.<name>"]
            # Redis: the ACL user's key patterns, as the table writes them
            acl = await operator.execute_command("ACL", "GETUSER", grant.user)
            keys = acl[b"keys"].decode().split()
            mine = re.compile(f"^(%R)?~{re.escape(prefix)}:")
            held: dict[bool, set[str]] = {True: set(), False: set()}
            for key in keys:
                found = mine.match(key)
                assert found is not None, (grant.user, key)
                pattern = key[found.end() :].replace(name, "<name>") if name else key[found.end() :]
                held[found.group(1) is None].add(pattern)
            assert held[True] == _families(row["Redis read-write"]), kind
            assert held[False] == _families(row["Redis read-only"]), kind
            # the broker: which events it may publish and bind, permission and topic
            perms = await asyncio.to_thread(mesh_access.management.permissions, vhost, grant.user)
            assert perms is not None, grant.user
            topics = await asyncio.to_thread(
                mesh_access.management.topic_permissions, vhost, grant.user
            )
            topic = next((t for t in topics if t["exchange"] == events), None)
            for column, perm, side in (
                ("events published", "write", "write"),
                ("events bound", "read", "read"),
            ):
                may = re.search(perms[perm], events) is not None
                for key in EVENT_KEYS:
                    allowed = may and (topic is None or re.search(topic[side], key) is not None)
                    assert allowed == _listed(row[column], key), (kind, column, key)
            checked.add(kind)
    finally:
        await operator.aclose()
    assert checked == {"admin", "router", "registry", "worker", "client", "observer"}
