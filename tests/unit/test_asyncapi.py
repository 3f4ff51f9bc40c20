"""The AsyncAPI document: its structure holds together, covers the topology, has not drifted."""

from __future__ import annotations

import re
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import pytest

from mesh.asyncapi import document, event_types, render
from mesh.cli.main import main, version
from mesh.config import Settings
from mesh.schemas import WIRE_MODELS, Event
from mesh.topology import DEAD_REASONS, PRIORITY_BANDS, Topology, TopologySpec

AGENT, INSTANCE = "{agentId}", "{instanceId}"
#: the document a checkout commits (for the default namespace)
COMMITTED = Path(__file__).resolve().parents[2] / "schemas" / "asyncapi.json"

PARAM = re.compile(r"{([A-Za-z]+)}")
#: JSON Schema keywords newer than draft-07 (AsyncAPI's schema format is a draft-07 superset)
NEWER_KEYWORDS = frozenset(
    {
        "$defs",
        "$anchor",
        "$dynamicRef",
        "$dynamicAnchor",
        "prefixItems",
        "dependentRequired",
        "dependentSchemas",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)

TOPOLOGIES = [
    Topology(),
    Topology(namespace="acme", queue_type="quorum", retry_delays_ms=(250, 2_000)),
]


@pytest.fixture(params=TOPOLOGIES, ids=["classic", "quorum"])
def topology(request: pytest.FixtureRequest) -> Topology:
    t: Topology = request.param
    return t


@pytest.fixture
def doc(topology: Topology) -> dict[str, Any]:
    return document(topology)


def resolve(doc: dict[str, Any], ref: str) -> Any:
    """The node a local `$ref` points at (raises on a dangling one)."""
    assert ref.startswith("#/"), f"not a local ref: {ref}"
    node: Any = doc
    for part in ref[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(node, dict) and key in node, f"dangling ref {ref} (at {key!r})"
        node = node[key]
    return node


def refs(node: Any, path: str = "#") -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield path, value
            else:
                yield from refs(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from refs(value, f"{path}/{i}")


def keywords(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key
            if key not in {"properties", "enum", "required", "examples", "default"}:
                yield from keywords(value)
            elif key == "properties":
                for sub in value.values():
                    yield from keywords(sub)
    elif isinstance(node, list):
        for value in node:
            yield from keywords(value)


def substitute(address: str, **values: str) -> str:
    return PARAM.sub(lambda m: values[m.group(1)], address)


def amqp_names(doc: dict[str, Any], kind: str) -> set[str]:
    return {
        c["bindings"]["amqp"][kind]["name"]
        for c in doc["channels"].values()
        if kind in c["bindings"]["amqp"]
    }


# --- structure ---------------------------------------------------------------------------
def test_header_info_and_server(doc: dict[str, Any]) -> None:
    assert doc["asyncapi"] == "3.0.0"
    assert doc["info"]["title"] == "Agent-Reach mesh"
    assert doc["info"]["version"] == metadata.version("agent-reach-mesh") == version().split()[0]
    server = doc["servers"]["amqp"]
    assert server["protocol"] == "amqp" and server["protocolVersion"] == "0.9.1"
    assert server["host"] == "127.0.0.1:5672"
    # the user is shown (as aio-pika's masking does), never the password
    assert "guest:******@" in server["description"]
    assert "guest:guest" not in orjson.dumps(server).decode()


def test_every_channel_has_an_address_and_amqp_bindings(doc: dict[str, Any]) -> None:
    assert doc["channels"]
    for cid, channel in doc["channels"].items():
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+", cid), cid
        assert isinstance(channel["address"], str) and channel["address"], cid
        amqp = channel["bindings"]["amqp"]
        assert amqp["bindingVersion"] == "0.3.0"
        if amqp["is"] == "routingKey":
            assert "queue" not in amqp
            assert amqp["exchange"]["type"] in {"direct", "topic"}
            assert amqp["exchange"]["durable"] is True
        else:
            assert amqp["is"] == "queue" and "exchange" not in amqp, cid
            assert amqp["queue"]["name"] == channel["address"]
            assert isinstance(amqp["x-arguments"], dict) and amqp["x-bindings"], cid
        # every {parameter} of the address is described, and nothing else
        assert set(PARAM.findall(channel["address"])) == set(channel.get("parameters", {})), cid


def test_operations_reference_their_channel_and_its_messages(doc: dict[str, Any]) -> None:
    assert doc["operations"]
    for oid, op in doc["operations"].items():
        assert op["action"] in {"send", "receive"}, oid
        assert op["messages"], oid
        for part in [op, *([op["reply"]] if "reply" in op else [])]:
            channel_ref = part["channel"]["$ref"]
            channel = resolve(doc, channel_ref)
            for m in part["messages"]:
                # AsyncAPI 3: an operation's messages are messages of its channel
                assert m["$ref"].startswith(f"{channel_ref}/messages/"), (oid, m)
                assert resolve(doc, m["$ref"]) in channel.get("messages", {}).values()
        kind = resolve(doc, op["channel"]["$ref"])["bindings"]["amqp"]["is"]
        # publishers write exchanges, consumers read queues
        assert kind == ("routingKey" if op["action"] == "send" else "queue"), oid


def test_every_message_payload_is_a_component_schema(doc: dict[str, Any]) -> None:
    messages = doc["components"]["messages"]
    for name, message in messages.items():
        ref = message["payload"]["$ref"]
        assert ref.startswith("#/components/schemas/"), name
        assert isinstance(resolve(doc, ref), dict)
    for channel in doc["channels"].values():
        for m in channel.get("messages", {}).values():
            assert m["$ref"].startswith("#/components/messages/")
    payloads = {m["payload"]["$ref"].rsplit("/", 1)[1] for m in messages.values()}
    assert {model.__name__ for model in WIRE_MODELS.values()} <= payloads


def test_every_ref_in_the_document_resolves(doc: dict[str, Any]) -> None:
    found = list(refs(doc))
    assert len(found) > 50
    for path, ref in found:
        assert not ref.startswith("#/$defs/"), path
        resolve(doc, ref)


def test_component_schemas_are_the_exported_json_schemas(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    for stem, model in WIRE_MODELS.items():
        exported = orjson.loads((COMMITTED.parent / "json" / f"{stem}.schema.json").read_bytes())
        mine = schemas[model.__name__]
        assert "$id" not in mine and "$schema" not in mine
        assert mine["properties"].keys() == exported["properties"].keys(), stem
        assert mine.get("required") == exported.get("required"), stem
        for name, sub in exported.get("$defs", {}).items():
            assert schemas[name]["properties"].keys() == sub["properties"].keys()
    for name, schema in schemas.items():
        newer = NEWER_KEYWORDS & set(keywords(schema))
        assert not newer, f"{name} uses {newer}: not in AsyncAPI's draft-07 schema format"


def test_event_types_are_valid_event_types() -> None:
    types = event_types()
    assert {"task.completed", "agent.up", "route.decision", "alert.loop"} <= set(types)
    for t in types:
        Event(type=t)


# --- coverage of the topology --------------------------------------------------------------
def test_channels_cover_every_exchange_queue_and_binding(
    topology: Topology, doc: dict[str, Any]
) -> None:
    spec: TopologySpec = (
        topology.static_spec()
        + topology.agent_spec(AGENT)
        + topology.instance_spec(AGENT, INSTANCE)
    )
    assert {ex.name for ex in spec.exchanges} <= amqp_names(doc, "exchange")
    assert amqp_names(doc, "exchange") <= {ex.name for ex in topology.static_spec().exchanges}
    assert {q.name for q in spec.queues} <= amqp_names(doc, "queue")
    by_queue = {
        c["address"]: c["bindings"]["amqp"]
        for c in doc["channels"].values()
        if c["bindings"]["amqp"]["is"] == "queue"
    }
    for q in spec.queues:
        amqp = by_queue[q.name]
        assert amqp["x-arguments"] == dict(q.arguments), q.name
        assert amqp["queue"]["exclusive"] is q.exclusive and amqp["queue"]["durable"] is q.durable
    for b in spec.bindings:
        assert {"exchange": b.exchange, "routingKey": b.routing_key} in by_queue[b.queue][
            "x-bindings"
        ], b
    # the queues components declare themselves are there too
    for name in (
        topology.session_queue(INSTANCE),
        topology.reply_queue("{user}.{clientId}"),
        topology.bid_queue("{collectorId}"),
        topology.observer_queue("{user}", "{observerName}"),
        topology.events_queue("{user}", "{tailId}"),
    ):
        assert name in by_queue


#: the Topology builder each ``declare_queue`` site outside mesh/topology.py names its
#: queue with, and the builder's arguments as the document's parameters
DECLARED_BY: dict[str, tuple[str, ...]] = {
    "reply_queue": ("{user}.{clientId}",),
    "session_queue": ("{instanceId}",),
    "bid_queue": ("{collectorId}",),
    "snapshot_queue": ("{snapshotId}",),
    "selector_queue": ("{routerId}",),
    "events_queue": ("{user}", "{tailId}"),
}
_DECLARE = "declare_queue("


def declare_calls(source: str) -> Iterator[str]:
    """The argument text of every ``declare_queue(...)`` call in `source`."""
    start = source.find(_DECLARE)
    while start != -1:
        depth, i = 1, start + len(_DECLARE)
        while depth and i < len(source):
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        yield source[start + len(_DECLARE) : i - 1]
        start = source.find(_DECLARE, i)


_BUILDER = re.compile(r"topo(?:logy)?\.(?P<name>[a-z_]+_queue)\(")


def test_every_queue_a_process_declares_is_documented(
    topology: Topology, doc: dict[str, Any]
) -> None:
    package = Path(__file__).resolve().parents[2] / "mesh"
    found: set[str] = set()
    for path in package.rglob("*.py"):
        if path.name == "topology.py":
            continue
        for args in declare_calls(path.read_text()):
            if "passive=True" in args:
                continue  # a look at a queue of the topology, not a declaration
            builder = _BUILDER.search(args)
            assert builder is not None, f"{path}: a queue not named by Topology"
            found.add(builder["name"])
    assert found == set(DECLARED_BY), "a new declare site: add its queue to mesh/asyncapi.py"
    addresses = {c["address"] for c in doc["channels"].values()}
    for name, args in DECLARED_BY.items():
        assert getattr(topology, name)(*args) in addresses, name


def test_queue_addresses_are_the_names_processes_really_use(
    topology: Topology, doc: dict[str, Any]
) -> None:
    channels = doc["channels"]
    # a MeshClient's queue is ``<ns>.reply.<login>.<client id>`` (MeshClient.queue_id)
    reply = substitute(channels["queue.reply"]["address"], user="web", clientId="c1")
    assert reply == topology.reply_queue("web.c1")
    key = substitute(channels["exchange.replies"]["address"], user="web", clientId="c1")
    assert key == topology.reply_key(reply)
    assert substitute(channels["queue.observer"]["address"], user="obs", observerName="main") == (
        f"{topology.namespace}.observer.obs.main"
    )
    observer = channels["queue.observer"]["bindings"]["amqp"]["x-arguments"]
    assert observer["x-max-length"] == Settings.model_fields["observer_queue_max_length"].default
    assert observer["x-overflow"] == "drop-head"
    tail = substitute(channels["queue.observer.events"]["address"], user="obs", tailId="ab12")
    assert tail == f"{topology.namespace}.observer.obs.events-ab12"
    # an observer role may declare every queue under its prefix: the tail is one of them
    assert tail.startswith(topology.observer_queue_prefix("obs"))


def test_servers_are_the_configured_broker_with_credentials_masked() -> None:
    settings = Settings(
        namespace="acme",
        amqp_url="amqps://bob:s3cret@rabbit-1.example/prod,amqp://bob:s3cret@rabbit-2:5673/prod",
        observer_queue_max_length=500,
    )
    doc = document(settings)
    servers = doc["servers"]
    assert list(servers) == ["amqp", "amqp2"]
    assert servers["amqp"]["host"] == "rabbit-1.example:5671"
    assert servers["amqp"]["protocol"] == "amqps" and servers["amqp"]["pathname"] == "/prod"
    assert servers["amqp2"]["host"] == "rabbit-2:5673"
    assert "amqps://bob:******@rabbit-1.example/prod" in servers["amqp"]["description"]
    assert "s3cret" not in orjson.dumps(doc).decode()
    assert "acme.ingress" in {c["address"] for c in doc["channels"].values()} | {
        c["bindings"]["amqp"].get("exchange", {}).get("name") for c in doc["channels"].values()
    }
    observer = doc["channels"]["queue.observer"]["bindings"]["amqp"]["x-arguments"]
    assert observer["x-max-length"] == 500


def test_parameters_give_the_real_names_and_keys(topology: Topology, doc: dict[str, Any]) -> None:
    channels = doc["channels"]
    delay = topology.retry_delays_ms[0]
    params = {"agentId": "pay", "band": "high", "delay": str(delay), "instanceId": "pay-1"}
    dispatch = substitute(channels["exchange.capabilities"]["address"], **params)
    assert dispatch == topology.agent_routing_key("pay", 9)
    retry = substitute(channels["exchange.retries"]["address"], **params)
    assert retry == topology.retry_key(delay, "pay", 9)
    assert topology.agent_of_routing_key(retry) == "pay"
    assert substitute(channels["exchange.sessions"]["address"], **params) == (
        topology.session_key("pay", "pay-1")
    )
    enums = channels["exchange.retries"]["parameters"]["delay"]["enum"]
    assert enums == [str(d) for d in topology.retry_delays_ms]
    assert channels["exchange.dlx.dead"]["parameters"]["reason"]["enum"] == list(DEAD_REASONS)
    for reason in DEAD_REASONS:
        assert topology.dead_key(reason) == substitute(
            channels["exchange.dlx.dead"]["address"], reason=reason
        )
    # both queue modes: one queue per band, for the routers and for each agent
    bands = channels["exchange.capabilities"]["parameters"]["band"]["enum"]
    assert bands == [b for b, _ in PRIORITY_BANDS]
    ingress = substitute(channels["exchange.ingress"]["address"], **params)
    assert ingress == topology.ingress_band_key(9)
    for role in ("worker", "router"):
        receivers = [op for op in doc["operations"] if op.startswith(f"{role}.receiveTask")]
        assert len(receivers) == len(PRIORITY_BANDS), role


# --- the committed file ------------------------------------------------------------------
def test_rendering_is_deterministic() -> None:
    assert render(Topology()) == render(Topology())
    assert render(Topology()) == render(Topology.from_settings(Settings()))


def test_committed_asyncapi_document_has_not_drifted() -> None:
    assert COMMITTED.read_bytes() == render(Topology()), (
        "schemas/asyncapi.json drifted: run `mesh asyncapi --out schemas/asyncapi.json`"
    )


def test_the_command_writes_and_checks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "doc.json"
    assert main(["asyncapi", "--out", str(out)]) == 0
    assert out.read_bytes() == render(Topology())
    assert main(["asyncapi", "--out", str(out), "--check"]) == 0
    out.write_bytes(b"{}\n")
    capsys.readouterr()
    assert main(["asyncapi", "--out", str(out), "--check"]) == 1
    assert f"run `mesh asyncapi --out {out}`" in capsys.readouterr().err
    # without --out: stdout, for the configured namespace; nothing is written anywhere
    monkeypatch.setenv("MESH_NAMESPACE", "acme")
    monkeypatch.chdir(tmp_path)
    assert main(["asyncapi"]) == 0
    printed = capsys.readouterr().out
    assert '"acme.ingress"' in printed and '"mesh.ingress"' not in printed
    assert orjson.loads(printed)["asyncapi"] == "3.0.0"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.json"]
    assert main(["asyncapi", "--check"]) == 2
    assert "needs --out PATH" in capsys.readouterr().err
