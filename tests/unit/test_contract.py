"""`mesh.contract.TABLE` against the code: the AsyncAPI operations are its documented rows,
the grants of `mesh access` are folded from it, and every row's grant fits the names and
routing keys the topology declares for its channel (so a renamed queue, a new binding or a
new exchange without a row fails here)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from mesh.access.patterns import reply_queue_regex
from mesh.access.roles import (
    AccessScope,
    Grant,
    Role,
    amqp_permissions,
    build_plan,
    grant_for,
    roles_for,
)
from mesh.asyncapi import channels, expand, operations
from mesh.config import Settings
from mesh.contract import TABLE, Bind, Consume, Own, Publish, Row, Who, rows_of
from mesh.router.guard import IngressGuard
from mesh.topology import ALL_EVENTS, OBSERVED_EVENTS, Topology

NS = "acme.prod"
TOPOLOGIES = [Topology(namespace=NS), Topology(namespace=NS, queue_type="quorum")]
SCOPE = AccessScope(NS, "tenant1")
AGENT = "team.alpha"
PARAM = re.compile(r"{([A-Za-z]+)}")
#: queues nobody consumes: the broker dead-letters them when their TTL is up
BROKER_MOVED = re.compile(rf"^{re.escape(NS)}\.retry\.[0-9]+$")


def role_of(row: Row) -> Role:
    """The provisioned role a row's grant is for (operator: ``mesh dlq`` runs as admin)."""
    if row.role == "operator":
        return Role("admin")
    if row.role in ("worker", "client", "observer"):
        return Role(row.role, AGENT)
    return Role(row.role)


def concrete(address: str, row: Row, user: str) -> str:
    """`address` with its AsyncAPI parameters filled as `row`'s role would meet them."""
    client = f"{AGENT}-1" if row.role == "worker" else "c1"
    values = {
        "user": user,
        "tailId": "t1",
        "observerName": "main",
        "agentId": AGENT,
        "instanceId": f"{AGENT}-1",
        "clientId": client,
        "collectorId": "r1",
        "snapshotId": "r1",
        "routerId": "r1",
        "delay": "1000",
        "band": "high",
        "reason": "invalid",
    }
    return PARAM.sub(lambda m: values[m.group(1)], address)


def matches(regex: str, name: str) -> bool:
    return re.search(regex, name) is not None


def topic(g: Grant, exchange: str) -> tuple[str, str] | None:
    found = [(tp.write, tp.read) for tp in g.topics if tp.exchange == exchange]
    return found[0] if found else None


def channels_of(row: Row, t: Topology, chans: dict[str, Any], user: str) -> list[dict[str, Any]]:
    """The AsyncAPI channels of a row; the observer's queue is not in the document (one
    per broker user and observer name), so it is built from `Topology.observer_spec`, as
    `mesh.observer.feed` binds it under access control."""
    if row.channel == "queue.observer":
        spec = t.observer_spec(user, "main", 100, OBSERVED_EVENTS)
        (q,) = spec.queues
        return [
            {
                "address": q.name,
                "bindings": {
                    "amqp": {
                        "is": "queue",
                        "x-bindings": [
                            {"exchange": b.exchange, "routingKey": b.routing_key}
                            for b in spec.bindings
                        ],
                    }
                },
            }
        ]
    return [chans[cid] for _, cid, _ in expand(row, t)]


# --- the AsyncAPI side -------------------------------------------------------------------
@pytest.mark.parametrize("t", TOPOLOGIES, ids=["classic", "quorum"])
def test_asyncapi_operations_are_the_documented_rows(t: Topology) -> None:
    chans = channels(t)
    ops = operations(t, chans)
    expected: dict[str, tuple[Row, str, str]] = {}
    for row in TABLE:
        if row.documented:
            for oid, cid, summary in expand(row, t):
                assert oid not in expected, f"two rows make operation {oid}"
                expected[oid] = (row, cid, summary)
    assert set(ops) == set(expected)
    for oid, (row, cid, summary) in expected.items():
        op = ops[oid]
        assert op["action"] == row.action, oid
        assert op["channel"] == {"$ref": f"#/channels/{cid}"}, oid
        assert [m["$ref"].rsplit("/", 1)[1] for m in op["messages"]] == list(row.messages)
        assert op["summary"] == summary and op["tags"] == [{"name": row.role}], oid
        ack = op.get("bindings", {}).get("amqp", {}).get("ack")
        assert ack == row.ack, oid
        reply = op.get("reply")
        if row.reply is None:
            assert reply is None, oid
        else:
            assert reply["channel"] == {"$ref": f"#/channels/{row.reply[0]}"}
            assert [m["$ref"].rsplit("/", 1)[1] for m in reply["messages"]] == list(row.reply[1])
        # a row names messages its channel carries
        assert set(row.messages) <= set(chans[cid].get("messages", {})), oid


def test_undocumented_rows_say_why_in_the_table() -> None:
    hidden = {(r.role, r.op) for r in TABLE if not r.documented}
    assert hidden == {("router", "sendInstanceControl")}


@pytest.mark.parametrize("t", TOPOLOGIES, ids=["classic", "quorum"])
def test_every_declared_exchange_and_queue_has_a_row(t: Topology) -> None:
    chans = channels(t)
    rowed = {cid for row in TABLE for _, cid, _ in expand(row, t)}
    queues = {
        cid: c["address"] for cid, c in chans.items() if c["bindings"]["amqp"]["is"] == "queue"
    }
    unconsumed = {
        name for cid, name in queues.items() if cid not in rowed and not BROKER_MOVED.match(name)
    }
    assert not unconsumed, f"queues with no receiving row: {sorted(unconsumed)}"
    published = {
        chans[cid]["bindings"]["amqp"]["exchange"]["name"]
        for row in TABLE
        if row.action == "send"
        for _, cid, _ in expand(row, t)
    }
    declared = {ex.name for ex in t.static_spec().exchanges}
    assert declared <= published, f"exchanges no row sends to: {sorted(declared - published)}"
    # and the runtime queues of the components are channels too
    assert {q.name for q in t.static_spec().queues} <= set(queues.values())


# --- the broker side ---------------------------------------------------------------------
@pytest.mark.parametrize("t", TOPOLOGIES, ids=["classic", "quorum"])
def test_provisioned_grants_are_folded_from_the_table(t: Topology) -> None:
    plan = build_plan(SCOPE, t, roles_for([AGENT], [AGENT], [AGENT]))
    for g in plan.grants:
        if g.role.kind == "admin":
            continue
        who = Who(t, g.user, g.role.name)
        folded = amqp_permissions(rows_of(g.role.kind), who)
        assert (g.configure, g.write, g.read, g.topics) == folded, g.role.label
        # a topic permission for exactly the topic exchanges its rows publish to or bind
        exchanges = set()
        for row in rows_of(g.role.kind):
            if not row.granted:
                continue
            if isinstance(row.grant, Publish) and row.grant.keys is not None:
                exchanges.add(row.grant.exchange(t))
            if isinstance(row.grant, Own):
                exchanges |= {b.exchange(t) for b in row.grant.binds}
        assert {tp.exchange for tp in g.topics} == exchanges, g.role.label


@pytest.mark.parametrize("t", TOPOLOGIES, ids=["classic", "quorum"])
@pytest.mark.parametrize("row", TABLE, ids=lambda r: f"{r.role}.{r.op}")
def test_each_row_grant_fits_its_channel(row: Row, t: Topology) -> None:
    """The grant a row implies lets the role do exactly what the channel declares: publish
    to its exchange with its key, or consume its queue (and, for its own queues, declare
    them and bind them as the topology binds them)."""
    role = role_of(row)
    g = grant_for(role, SCOPE, t)
    chans = channels(t)
    if not row.granted and row.role != "operator":
        # only without access control: the provisioned grant leaves it out
        assert isinstance(row.grant, Publish)
        assert not matches(g.write, row.grant.exchange(t))
        return
    exchange_types = {ex.name: ex.type.value for ex in t.static_spec().exchanges}
    for channel in channels_of(row, t, chans, g.user):
        amqp = channel["bindings"]["amqp"]
        if row.action == "send":
            assert isinstance(row.grant, Publish)
            exchange = amqp["exchange"]["name"]
            assert exchange == row.grant.exchange(t)
            assert matches(g.write, exchange), exchange
            assert (row.grant.keys is None) == (exchange_types[exchange] == "direct"), exchange
            perm = topic(g, exchange)
            keyed = row.grant.keys is not None and row.role != "operator"
            if keyed and "{eventType}" not in channel["address"]:
                key = concrete(channel["address"], row, g.user)
                assert perm is not None and matches(perm[0], key), key
            continue
        assert amqp["is"] == "queue"
        queue = concrete(channel["address"], row, g.user)
        assert matches(g.read, queue), queue
        if isinstance(row.grant, Consume):
            assert matches(row.grant.queue(Who(t, g.user, role.name)), queue)
            continue
        assert isinstance(row.grant, Own)
        assert matches(g.configure, queue) and matches(g.write, queue), queue
        binds: dict[str, Bind] = {b.exchange(t): b for b in row.grant.binds}
        for binding in amqp["x-bindings"]:
            exchange = binding["exchange"]
            assert exchange in binds and matches(g.read, exchange), exchange
            perm = topic(g, exchange)
            assert perm is not None, exchange
            key = concrete(binding["routingKey"], row, g.user)
            assert matches(perm[1], key), (exchange, key)


def test_a_role_gets_nothing_another_row_does_not_give() -> None:
    """A worker may not consume another agent's queue nor bind another agent's keys; a
    client may not read any agent queue (the table is the whole grant)."""
    t = TOPOLOGIES[0]
    worker = grant_for(Role("worker", AGENT), SCOPE, t)
    assert matches(worker.read, t.agent_queue(AGENT))
    assert not matches(worker.read, t.agent_queue("team.beta"))
    control = topic(worker, t.control)
    assert control is not None and not matches(control[1], t.control_agent_key("team.beta"))
    client = grant_for(Role("client", "web"), SCOPE, t)
    assert not matches(client.read, t.agent_queue(AGENT))
    assert not matches(client.configure, t.router_queue)


def test_the_observer_binds_no_event_with_request_texts_unless_allowed() -> None:
    t = TOPOLOGIES[0]
    observer = Role("observer", "ops")
    narrow = topic(grant_for(observer, SCOPE, t), t.events)
    assert narrow is not None
    for key in (*OBSERVED_EVENTS, "task.completed", "agent.up", "alert.no_match"):
        assert matches(narrow[1], key), key
    # decisions and learning carry the request's text; "#" and "*.x" would reach them
    for key in ("route.decision", "route.learned", "route.#", "#", "*.decision", "*.*"):
        assert not matches(narrow[1], key), key
    wide = topic(grant_for(observer, SCOPE, t, observer_reads_requests=True), t.events)
    assert wide is not None
    assert all(matches(wide[1], key) for key in (*ALL_EVENTS, "route.decision"))
    # what it may publish does not change
    assert narrow[0] == wide[0]


def test_reply_grants_match_by_exact_name_and_the_routers_guard_agrees() -> None:
    """User ``web`` neither reads nor binds ``web.eu``'s reply queues, and a router does not
    answer ``web`` at them: the guard uses the grant's regex."""
    t = TOPOLOGIES[0]
    web, web_eu = SCOPE.user(Role("client", "web")), SCOPE.user(Role("client", "web.eu"))
    theirs, mine = t.reply_queue(f"{web_eu}.c1"), t.reply_queue(f"{web}.c1")
    g = grant_for(Role("client", "web"), SCOPE, t)
    assert matches(g.read, mine) and not matches(g.read, theirs)
    assert re.fullmatch(reply_queue_regex(t, web), mine)
    assert not re.fullmatch(reply_queue_regex(t, web), theirs)
    # a worker's reply queues are its instances': <agent>-<suffix without dots>
    user = SCOPE.user(Role("worker", "x"))
    w = grant_for(Role("worker", "x"), SCOPE, t)
    assert matches(w.read, t.reply_queue(f"{user}.x-1"))
    longer = SCOPE.user(Role("worker", "x.x-q"))
    assert not matches(w.read, t.reply_queue(f"{longer}.x.x-q-1"))


def test_the_routers_guard_answers_a_user_only_at_its_own_reply_queues() -> None:
    t = TOPOLOGIES[0]
    guard = IngressGuard(Settings(namespace=NS, access_control=True), t)
    web = guard.scope.user(Role("client", "web"))
    web_eu = guard.scope.user(Role("client", "web.eu"))
    assert guard.may_answer(t.reply_queue(f"{web}.c1"), web)
    assert not guard.may_answer(t.reply_queue(f"{web_eu}.c1"), web)  # the old prefix test
    assert not guard.may_answer(t.reply_queue(f"{web}.c1.x"), web)
    assert guard.may_answer(t.reply_queue(f"{web_eu}.c1"), web_eu)
    worker = guard.scope.user(Role("worker", "team.alpha"))
    assert guard.may_answer(t.reply_queue(f"{worker}.team.alpha-1"), worker)
    assert not guard.may_answer(t.reply_queue(f"{worker}.team.beta-1"), worker)
