"""The AsyncAPI 3.0 document of the mesh: every channel, who sends and receives what, and
the wire contracts (`mesh asyncapi` prints it, or writes it to ``--out``).

Its ``servers`` are the configured broker (``MESH_AMQP_URL``, passwords masked) and its
channels every queue a process declares (`_runtime_queues`). Pure: no broker, no I/O.
Every exchange and queue name comes from `Topology` (its specs and name methods, called
with the AsyncAPI parameters such as ``{agentId}`` for the ids only known at run time);
the message schemas are the JSON Schemas `mesh schemas export` writes
(`mesh.schemas.WIRE_MODELS`), their ``$defs`` hoisted into ``components.schemas`` so the
document is self-contained.

Channels are of two kinds, as the AMQP binding has them: an exchange with one routing-key
family (``bindings.amqp.is = routingKey``, the channel's address is the key) and a queue
(``is = queue``, the address is the queue's name; its arguments and bindings are in the
``x-arguments`` / ``x-bindings`` extensions of the binding). Publishers send to exchange
channels; consumers receive from queue channels. The operations (who sends and receives
what) are the documented rows of `mesh.contract.TABLE`, the table the broker grants of
`mesh.access.roles` are folded from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from mesh import redis_contract
from mesh.client import REPLY_QUEUE_EXPIRES_MS
from mesh.config import Settings, default_of, mask_url_safe
from mesh.contract import TABLE, Row
from mesh.dispatch.states import STATES
from mesh.distribution import installed_version
from mesh.observer.alerts import ALERT_KINDS
from mesh.registry.events import AGENT_DOWN, AGENT_EVENTS, AGENT_LEASES, AGENT_UP
from mesh.router.outcomes import COUNTS_EVENT, LEARNED_EVENT, LEARNING_EVENTS, own_outcomes
from mesh.schemas import WIRE_MODELS
from mesh.topology import (
    AGENT_HEADER,
    BATCH_HEADER,
    CODE_HEADER,
    CONCURRENCY_HEADER,
    DEAD_REASONS,
    DEFAULT_BAND,
    DEFERRED_HEADER,
    DELAY_HEADER,
    DETAILS_HEADER,
    INSTANCE_HEADER,
    INVALID_KEEP_BYTES,
    LAST_ERROR_HEADER,
    OBSERVED_EVENTS,
    PRIORITY_BANDS,
    REASON_HEADER,
    SCORE_HEADER,
    SHA256_HEADER,
    SIZE_HEADER,
    THRESHOLD_HEADER,
    TRUNCATED_HEADER,
    BindingSpec,
    ExchangeSpec,
    QueueSpec,
    Topology,
    TopologySpec,
)

ASYNCAPI_VERSION = "3.0.0"
AMQP_BINDING_VERSION = "0.3.0"
TITLE = "Agent-Reach mesh"

# AsyncAPI parameters: the ids a name or key holds that only exist at run time
AGENT = "{agentId}"
INSTANCE = "{instanceId}"
CLIENT = "{clientId}"
COLLECTOR = "{collectorId}"
SNAPSHOT = "{snapshotId}"
ROUTER = "{routerId}"
DELAY = "{delay}"
BAND = "{band}"
REASON = "{reason}"
EVENT_TYPE = "{eventType}"
USER = "{user}"
OBSERVER = "{observerName}"
TAIL = "{tailId}"

PARAMETER_DOCS: dict[str, str] = {
    "agentId": "a logical agent's id (`[A-Za-z0-9_.:@-]{1,128}`); its instances share its queue",
    "instanceId": "one worker process of an agent (under access control it starts `<agentId>-`)",
    "clientId": "the id of one MeshClient (random per client; a worker's: its instance id)",
    "user": "the AMQP user the process logs in as (MESH_AMQP_URL's; guest without one)",
    "observerName": "the observer's name (MESH_OBSERVER_NAME; its instances share the queue)",
    "tailId": "the random id of one `mesh events` (or `mesh demo`) tail",
    "collectorId": "the random id of one router's bid collector",
    "snapshotId": "the random id of one agent snapshot (a router's or `mesh agents`' feed)",
    "routerId": "the random id of one router's selector",
    "delay": "a retry delay in milliseconds, one of MESH_RETRY_DELAYS_MS",
    "band": (
        "a priority band, one queue each, drained by weight (MESH_PRIORITY_WEIGHTS, 5:3:1): "
        "envelope priority 8-10 high, 4-7 normal, 1-3 low"
    ),
    "reason": "why a message was dead-lettered",
    "eventType": "the event's `type`",
}

#: events published besides ``task.<state>`` and the registry's ``agent.*``
OTHER_EVENTS: tuple[str, ...] = (
    "route.decision",
    "route.feedback",
    LEARNED_EVENT,
    COUNTS_EVENT,
    *(f"alert.{kind}" for kind in ALERT_KINDS),
)

_PARAM = re.compile(r"{([A-Za-z]+)}")


def version() -> str:
    """The installed package's version (what `mesh --version` prints)."""
    found = installed_version()
    return found if found[0].isdigit() else "0.0.0+unknown"


def event_types() -> list[str]:
    """Every event type (routing key on the events exchange) the mesh publishes."""
    types = {f"task.{state}" for state in STATES}
    types |= {AGENT_UP, AGENT_DOWN, AGENT_LEASES, *OTHER_EVENTS}
    return sorted(types)


# --- schemas and messages ----------------------------------------------------------------
def _rewrite_refs(node: Any) -> Any:
    if isinstance(node, dict):
        out = {k: _rewrite_refs(v) for k, v in node.items()}
        ref = out.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            out["$ref"] = "#/components/schemas/" + ref[len("#/$defs/") :]
        return out
    if isinstance(node, list):
        return [_rewrite_refs(v) for v in node]
    return node


def _add_schema(schemas: dict[str, Any], name: str, schema: Mapping[str, Any]) -> None:
    if name in schemas and schemas[name] != schema:
        raise ValueError(f"two different JSON Schemas are named {name!r}")
    schemas[name] = dict(schema)


def component_schemas() -> dict[str, Any]:
    """The wire models' JSON Schemas (as `mesh schemas export` renders them), keyed by
    model name, with every ``$defs`` entry hoisted beside them and refs pointing there."""
    schemas: dict[str, Any] = {}
    for model in WIRE_MODELS.values():
        schema = dict(model.model_json_schema(mode="validation"))
        defs = schema.pop("$defs", {})
        # an embedded schema keeps no `$id`/`$schema`: an `$id` would re-base its refs
        schema.pop("$id", None)
        schema.pop("$schema", None)
        for name, sub in defs.items():
            _add_schema(schemas, name, _rewrite_refs(sub))
        _add_schema(schemas, model.__name__, _rewrite_refs(schema))
    # bodies without a wire model (mesh/registry/protocol.py, the dead letters)
    _add_schema(
        schemas,
        "RegistrationError",
        {
            "type": "object",
            "title": "RegistrationError",
            "description": "The registry's refusal of a registration (`register.error`).",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "details": {},
            },
            "required": ["code", "message"],
        },
    )
    _add_schema(
        schemas,
        "LeaseLost",
        {
            "type": "object",
            "title": "LeaseLost",
            "description": "The registry's notice that an instance's lease is gone: it "
            "re-registers for a new token (`lease.lost`).",
            "properties": {
                "instance_id": {"type": "string"},
                "token": {"type": "integer", "minimum": 1},
            },
            "required": ["instance_id", "token"],
        },
    )
    _add_schema(
        schemas,
        "AgentCard",
        {
            "type": "object",
            "title": "AgentCard",
            "description": "An A2A Agent Card, as published by the agent (`register.a2a`).",
        },
    )
    _add_schema(
        schemas,
        "DeadLetterBody",
        {
            "title": "DeadLetterBody",
            "description": "The body exactly as it was received (an invalid one: its first "
            f"{INVALID_KEEP_BYTES} bytes); usually a TaskEnvelope.",
        },
    )
    return schemas


def _headers(properties: Mapping[str, Any], required: Iterable[str] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": dict(properties)}
    if required:
        schema["required"] = sorted(required)
    return schema


def component_messages() -> dict[str, Any]:
    """One AsyncAPI message per kind of body on the wire, its payload a schema `$ref`."""

    def message(
        schema: str,
        summary: str,
        message_type: str | None = None,
        headers: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "contentType": "application/json",
            "payload": {"$ref": f"#/components/schemas/{schema}"},
            "summary": summary,
            "title": schema,
        }
        amqp: dict[str, Any] = {"bindingVersion": AMQP_BINDING_VERSION}
        if message_type is not None:
            amqp["messageType"] = message_type
        out["bindings"] = {"amqp": amqp}
        if headers is not None:
            out["headers"] = headers
        return out

    retry_headers = _headers(
        {
            DELAY_HEADER: {"type": "string", "description": "the delay it waited, in ms"},
            LAST_ERROR_HEADER: {
                "type": "string",
                "maxLength": 1000,
                "description": "the error of the attempt before",
            },
            DEFERRED_HEADER: {
                "description": "set on a copy a worker deferred or handed back: it may have "
                "run before"
            },
        }
    )
    dead_headers = _headers(
        {
            REASON_HEADER: {"type": "string", "enum": list(DEAD_REASONS)},
            DETAILS_HEADER: {"type": "string", "description": "JSON: why (bad fields, error)"},
            SIZE_HEADER: {"type": "integer", "description": "invalid: the full body's size"},
            SHA256_HEADER: {"type": "string", "description": "invalid: the full body's SHA-256"},
            TRUNCATED_HEADER: {"type": "boolean", "description": "invalid: only a prefix kept"},
        },
        required=[REASON_HEADER],
    )
    human_headers = _headers(
        {
            CODE_HEADER: {"type": "string", "description": "why no agent took it"},
            SCORE_HEADER: {"type": "number", "description": "the best agent's score"},
            THRESHOLD_HEADER: {"type": "number", "description": "the threshold it missed"},
        },
        required=[CODE_HEADER],
    )
    card_headers = _headers(
        {
            INSTANCE_HEADER: {"type": "string"},
            AGENT_HEADER: {"type": "string"},
            CONCURRENCY_HEADER: {"type": "integer", "minimum": 1},
        },
        required=[INSTANCE_HEADER],
    )
    batch_headers = _headers(
        {
            BATCH_HEADER: {
                "type": "integer",
                "minimum": 1,
                "description": "marks a batch: how many events it carries (a message "
                "without it is one Event)",
            }
        },
        required=[BATCH_HEADER],
    )
    messages = {
        "task": message("TaskEnvelope", "A task: submitted, dispatched or replayed"),
        "retriedTask": message(
            "TaskEnvelope", "A task sent back for another attempt", headers=retry_headers
        ),
        "result": message("Result", "The outcome of a task, to its caller"),
        "resultNotice": message(
            "Result", "A worker's outcome of a task, to the routers (access control)"
        ),
        "registration": message("Registration", "An instance asking to join", "register"),
        "agentCard": message(
            "AgentCard", "An instance joining with an A2A card", "register.a2a", card_headers
        ),
        "heartbeat": message("Heartbeat", "A lease renewal with the load", "heartbeat"),
        "heartbeatBatch": message(
            "HeartbeatBatch",
            "The heartbeats of one connection's instances that fell due together, each "
            "naming its reply queue; a registry takes each as a single heartbeat",
            "heartbeats",
        ),
        "deregistration": message("Deregistration", "A graceful goodbye", "deregister"),
        "registrationAck": message(
            "RegistrationAck", "The fencing token and lease terms", "register.ack"
        ),
        "registrationError": message(
            "RegistrationError", "A registration refused", "register.error"
        ),
        "leaseLost": message("LeaseLost", "An instance's lease is gone", "lease.lost"),
        "bidRequest": message("BidRequest", "A call for bids", "bid_request"),
        "bid": message("Bid", "An instance's confidence for a task"),
        "event": message("Event", "Something that happened; the routing key is its type"),
        "eventBatch": message(
            "EventBatch",
            "Events of one routing key that travelled together (task.*, route.decision: "
            "MESH_EVENT_BATCH_WINDOW_MS); a consumer reads this and a single event alike",
            headers=batch_headers,
        ),
        "feedback": message("Feedback", "A caller's verdict on one of its routed tasks"),
        "humanTask": message(
            "TaskEnvelope",
            "A task no agent took, for a person (its caller got a queued_for_human Result)",
            headers=human_headers,
        ),
        "deadLetter": message(
            "DeadLetterBody", "A message the mesh gave up on", headers=dead_headers
        ),
    }
    return messages


# --- channels ----------------------------------------------------------------------------
def _parameters(address: str, enums: Mapping[str, list[str]]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for name in _PARAM.findall(address):
        param: dict[str, Any] = {"description": PARAMETER_DOCS[name]}
        if name in enums:
            param["enum"] = enums[name]
        params[name] = param
    return params


def _refs(messages: Iterable[str]) -> dict[str, Any]:
    return {m: {"$ref": f"#/components/messages/{m}"} for m in messages}


def _optional(**fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that are not empty."""
    return {k: v for k, v in fields.items() if v}


class _Builder:
    def __init__(self, topology: Topology) -> None:
        self.t = topology
        self.channels: dict[str, Any] = {}
        self.enums: dict[str, list[str]] = {
            "delay": [str(d) for d in topology.retry_delays_ms],
            "band": [band for band, _ in PRIORITY_BANDS],
            "reason": list(DEAD_REASONS),
            "eventType": event_types(),
        }
        static = topology.static_spec()
        self.exchanges = {ex.name: ex for ex in static.exchanges}

    def exchange(
        self, cid: str, exchange: str, key: str, description: str, messages: Iterable[str]
    ) -> str:
        ex: ExchangeSpec = self.exchanges[exchange]
        self.channels[cid] = {
            "address": key,
            "title": f"{exchange} → {key}",
            "description": description,
            **_optional(messages=_refs(messages), parameters=_parameters(key, self.enums)),
            "bindings": {
                "amqp": {
                    "bindingVersion": AMQP_BINDING_VERSION,
                    "is": "routingKey",
                    "exchange": {
                        "name": ex.name,
                        "type": ex.type.value,
                        "durable": True,
                        "autoDelete": False,
                        "vhost": "/",
                    },
                }
            },
        }
        return cid

    def queue(
        self,
        cid: str,
        queue: QueueSpec,
        bindings: Iterable[BindingSpec],
        description: str,
        messages: Iterable[str],
    ) -> str:
        self.channels[cid] = {
            "address": queue.name,
            "title": queue.name,
            "description": description,
            **_optional(messages=_refs(messages), parameters=_parameters(queue.name, self.enums)),
            "bindings": {
                "amqp": {
                    "bindingVersion": AMQP_BINDING_VERSION,
                    "is": "queue",
                    "queue": {
                        "name": queue.name,
                        "durable": queue.durable,
                        "exclusive": queue.exclusive,
                        "autoDelete": queue.auto_delete,
                        "vhost": "/",
                    },
                    "x-arguments": dict(queue.arguments),
                    "x-bindings": [
                        {"exchange": b.exchange, "routingKey": b.routing_key}
                        for b in bindings
                        if b.queue == queue.name
                    ],
                }
            },
        }
        return cid


def _short(topology: Topology, name: str) -> str:
    """A channel id for a queue: its name without the namespace, parameters dropped."""
    short = name[len(topology.namespace) + 1 :]
    parts = (_PARAM.sub("", p).strip("-") for p in short.split("."))
    return "queue." + ".".join(p for p in parts if p)


def channels(topology: Topology, observer_max_length: int | None = None) -> dict[str, Any]:
    """Every exchange (one channel per routing-key family) and queue of the namespace
    (the observer's bounded by `observer_max_length`: the setting's default without it)."""
    t = topology
    b = _Builder(t)
    # one key per band: agent.<id>.<band>, task.<band>
    dispatch_key = t.agent_routing_key(AGENT).rsplit(".", 1)[0] + "." + BAND
    ingress_key = t.ingress_band_key(5).rsplit(".", 1)[0] + "." + BAND
    # `Topology.retry_key`: <delay>.<dispatch key>; `dead_key`: dead.<reason>
    retry_key = f"{DELAY}.{dispatch_key}"
    dead_key = t.dead_key(DEAD_REASONS[0]).rsplit(".", 1)[0] + "." + REASON
    session_key = t.session_key(AGENT, INSTANCE)
    reply_queue = t.reply_queue(f"{USER}.{CLIENT}")
    reply_key = t.reply_key(reply_queue) or ""

    # exchanges
    b.exchange(
        "exchange.ingress",
        t.ingress,
        ingress_key,
        "Tasks from callers, keyed by the band of their priority (any AMQP client: set "
        f"reply_to and correlation_id for the Result; the bare key `{t.ingress_key}` lands "
        f"in band {DEFAULT_BAND!r}).",
        ["task"],
    )
    b.exchange(
        "exchange.capabilities",
        t.capabilities,
        dispatch_key,
        "Dispatches of a router to one agent's queue (priority, expiration = accept timeout).",
        ["task"],
    )
    b.exchange(
        "exchange.capabilities.retried",
        t.capabilities,
        retry_key,
        "Retried tasks, dead-lettered here by their delay queue once it expired (the "
        "broker publishes them); agent queues bind `*.<dispatch key>`.",
        ["retriedTask"],
    )
    b.exchange(
        "exchange.control.agent",
        t.control,
        t.control_agent_key(AGENT),
        "Calls for bids to every instance of an agent.",
        ["bidRequest"],
    )
    b.exchange(
        "exchange.control.instance",
        t.control,
        t.instance_key(INSTANCE),
        "Control messages to one instance: every instance queue binds it, nothing publishes "
        "on it yet (calls for bids go to the agent key).",
        [],
    )
    b.exchange(
        "exchange.registry",
        t.registry,
        t.registry_key,
        "Registrations, heartbeats and goodbyes (AMQP `type`: register, register.a2a, "
        "heartbeat, heartbeats, deregister).",
        ["registration", "agentCard", "heartbeat", "heartbeatBatch", "deregistration"],
    )
    b.exchange(
        "exchange.sessions",
        t.sessions,
        session_key,
        "The registry's answers to one instance.",
        ["registrationAck", "registrationError", "leaseLost"],
    )
    b.exchange(
        "exchange.replies",
        t.replies,
        reply_key,
        "Results to a mesh client's reply queue (with the caller's correlation_id).",
        ["result"],
    )
    b.exchange(
        "exchange.results",
        t.results,
        t.results_key,
        "Workers' result notices to the routers (access control: a router answers).",
        ["resultNotice"],
    )
    b.exchange(
        "exchange.feedback",
        t.feedback,
        t.feedback_key,
        "Callers' feedback on their tasks, to the routers.",
        ["feedback"],
    )
    b.exchange(
        "exchange.human",
        t.human,
        t.human_key,
        "Tasks no agent scored above the threshold for while no fallback agent is configured "
        "(degradation level 2, MESH_HUMAN_QUEUE), to a person.",
        ["humanTask"],
    )
    b.exchange(
        "exchange.bids",
        t.bids,
        t.bid_key(COLLECTOR),
        "Bids to the router's collector that called for them.",
        ["bid"],
    )
    b.exchange(
        "exchange.events",
        t.events,
        EVENT_TYPE,
        "Lifecycle events (transient); task.submitted/routing/dispatched/accepted/"
        "processing only with MESH_PROGRESS_EVENTS. task.* and route.decision travel in "
        "batches of one routing key (eventBatch, x-mesh-batch) within "
        "MESH_EVENT_BATCH_WINDOW_MS; a batch of one is sent as the plain event.",
        ["event", "eventBatch"],
    )
    b.exchange(
        "exchange.retries",
        t.retry,
        retry_key,
        "Tasks a worker retries: held in the delay queue, then back to the agent.",
        ["retriedTask"],
    )
    b.exchange(
        "exchange.dlx.dead",
        t.dlx,
        dead_key,
        "Dead letters, to the dead-letter queue of their reason.",
        ["deadLetter"],
    )
    b.exchange(
        "exchange.dlx.dispatch",
        t.dlx,
        dispatch_key,
        "Dispatches that expired or were rejected in an agent queue, dead-lettered by the "
        "broker with their key: back to a router, which reroutes them.",
        ["task"],
    )
    b.exchange(
        "exchange.dlx.retried",
        t.dlx,
        retry_key,
        "Retried copies that expired or were rejected in an agent queue (their key still "
        "has the delay first): back to a router, as `exchange.dlx.dispatch`.",
        ["retriedTask"],
    )

    # queues of the namespace
    static = t.static_spec()
    queue_docs: dict[str, tuple[str, list[str]]] = {
        name: (
            f"Tasks of band {band!r} for the routers (competing consumers, each draining the "
            "bands by weight), and dispatches of that band coming back.",
            ["task", "retriedTask"],
        )
        for (name, _), (band, _) in zip(t.router_queues(), t.bands(), strict=True)
    }
    queue_docs |= {
        t.registry: (
            "Registry messages, for the registries.",
            [
                "registration",
                "agentCard",
                "heartbeat",
                "heartbeatBatch",
                "deregistration",
            ],
        ),
        t.results: ("Result notices, for the routers.", ["resultNotice"]),
        t.feedback: ("Feedback, for the routers.", ["feedback"]),
        t.human: (
            "Tasks waiting for a person (`mesh human list|take|answer`); copies expire after "
            "24 h, the desk in Redis keeps the task for idempotency_ttl_s.",
            ["humanTask"],
        ),
    }
    for delay in t.retry_delays_ms:
        queue_docs[t.retry_queue(delay)] = (
            f"Retried tasks wait {delay} ms (TTL), then go back to the capabilities exchange.",
            ["retriedTask"],
        )
    for reason in DEAD_REASONS:
        queue_docs[t.dead_queue(reason)] = (
            f"Dead letters of reason {reason!r} (`mesh dlq list|replay {reason}`).",
            ["deadLetter"],
        )
    for q in static.queues:
        doc, msgs = queue_docs[q.name]
        b.queue(_short(t, q.name), q, static.bindings, doc, msgs)

    # queues of each agent and instance
    agent = t.agent_spec(AGENT)
    for q in agent.queues:
        b.queue(
            _short(t, q.name),
            q,
            agent.bindings,
            "An agent's tasks, for its instances.",
            [
                "task",
                "retriedTask",
            ],
        )
    instance = t.instance_spec(AGENT, INSTANCE)
    for q in instance.queues:
        b.queue(
            _short(t, q.name),
            q,
            instance.bindings,
            "One instance's control queue (only for agents with a bidder).",
            ["bidRequest"],
        )

    # queues the components declare for themselves (not in the specs)
    if observer_max_length is None:
        observer_max_length = default_of("observer_queue_max_length")
    for spec, doc, msgs in _runtime_queues(t, observer_max_length):
        for q in spec.queues:
            b.queue(_short(t, q.name), q, spec.bindings, doc, msgs)
    return b.channels


def _runtime_queues(
    t: Topology, observer_max_length: int
) -> list[tuple[TopologySpec, str, list[str]]]:
    """The queues components declare themselves, as `mesh/client.py`, `registry/session.py`,
    `router/bids.py`, `registry/snapshot.py`, `router/keeper.py`, `observer/feed.py` and
    `cli/events.py` do (every ``declare_queue`` outside `mesh/topology.py`)."""
    reply_args: dict[str, Any] = {"x-expires": REPLY_QUEUE_EXPIRES_MS}
    if t.queue_type == "quorum":
        reply_args["x-queue-type"] = "quorum"
    reply = t.reply_queue(f"{USER}.{CLIENT}")
    session = t.session_queue(INSTANCE)
    bids = t.bid_queue(COLLECTOR)
    snapshot = t.snapshot_queue(SNAPSHOT)
    selector = t.selector_queue(ROUTER)
    tail = t.events_queue(USER, TAIL)

    def temp(name: str) -> QueueSpec:
        return QueueSpec(name, durable=False, exclusive=True, auto_delete=True)

    return [
        (
            TopologySpec(
                queues=(QueueSpec(reply, reply_args),),
                bindings=(BindingSpec(t.replies, reply, t.reply_key(reply) or ""),),
            ),
            "One mesh client's Results (durable, expires once abandoned).",
            ["result"],
        ),
        (
            TopologySpec(
                queues=(temp(session),),
                bindings=(BindingSpec(t.sessions, session, t.session_key(AGENT, INSTANCE)),),
            ),
            "One instance's registry session: acks, refusals, lease-lost notices.",
            ["registrationAck", "registrationError", "leaseLost"],
        ),
        (
            TopologySpec(
                queues=(temp(bids),),
                bindings=(BindingSpec(t.bids, bids, t.bid_key(COLLECTOR)),),
            ),
            "One router's bids.",
            ["bid"],
        ),
        (
            TopologySpec(
                queues=(temp(snapshot),),
                bindings=(BindingSpec(t.events, snapshot, AGENT_EVENTS),),
            ),
            "One agent snapshot's feed of agent.* events.",
            ["event", "eventBatch"],
        ),
        (
            TopologySpec(
                queues=(temp(selector),),
                bindings=tuple(
                    BindingSpec(t.events, selector, e)
                    for e in (*own_outcomes(ROUTER), *LEARNING_EVENTS)
                ),
            ),
            "One router's outcome and learning events: the outcomes of its own dispatches "
            "(a worker publishes ``task.<state>.<route.router>``), the untagged ones, and "
            "what the other routers learned and counted.",
            ["event", "eventBatch"],
        ),
        (
            t.observer_spec(USER, OBSERVER, observer_max_length),
            "The observer's events (`mesh observer`; durable, bounded: when it is behind, "
            "the oldest go first). Under access control without "
            "MESH_OBSERVER_READS_REQUESTS it binds only the events without request texts.",
            ["event", "eventBatch"],
        ),
        (
            TopologySpec(
                queues=(temp(tail),),
                bindings=tuple(BindingSpec(t.events, tail, key) for key in OBSERVED_EVENTS),
            ),
            "One `mesh events` tail, bound with each --filter pattern (default `#`; with "
            "the observer's login under access control, what its grant binds, shown here); "
            "`mesh demo` follows the events the same way (tailId `demo-<id>`).",
            ["event", "eventBatch"],
        ),
    ]


# --- operations --------------------------------------------------------------------------
def _operation(
    action: str,
    channel: str,
    messages: Iterable[str],
    summary: str,
    *,
    tag: str,
    ack: bool | None = None,
    reply: tuple[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    op: dict[str, Any] = {
        "action": action,
        "channel": {"$ref": f"#/channels/{channel}"},
        "messages": [{"$ref": f"#/channels/{channel}/messages/{m}"} for m in messages],
        "summary": summary,
        "tags": [{"name": tag}],
    }
    if ack is not None:
        op["bindings"] = {"amqp": {"bindingVersion": AMQP_BINDING_VERSION, "ack": ack}}
    if reply is not None:
        rchannel, rmessages = reply
        op["reply"] = {
            "channel": {"$ref": f"#/channels/{rchannel}"},
            "messages": [{"$ref": f"#/channels/{rchannel}/messages/{m}"} for m in rmessages],
        }
    return op


def expand(row: Row, topology: Topology) -> list[tuple[str, str, str]]:
    """(operation id, channel id, summary) of each AsyncAPI operation of a documented `row`:
    one, or one per member of its family (`Row.each`)."""
    oid = f"{row.role}.{row.op}"
    if row.each in ("agent_queue", "router_queue"):
        names = (
            [q.name for q in topology.agent_spec(AGENT).queues]
            if row.each == "agent_queue"
            else [name for name, _ in topology.router_queues()]
        )
        queues = [_short(topology, name) for name in names]
        return [
            (oid + cid[len(row.channel) :].replace(".", "").capitalize(), cid, row.summary)
            for cid in queues
        ]
    if row.each == "dead_reason":
        return [
            (
                oid + reason.capitalize(),
                _short(topology, topology.dead_queue(reason)),
                row.summary.format(reason=reason),
            )
            for reason in DEAD_REASONS
        ]
    return [(oid, row.channel, row.summary)]


def operations(topology: Topology, channel_ids: Mapping[str, Any]) -> dict[str, Any]:
    """Who sends and receives what, per role: the documented rows of `mesh.contract.TABLE`."""
    ops: dict[str, Any] = {}
    for row in TABLE:
        if not row.documented:
            continue
        for oid, cid, summary in expand(row, topology):
            ops[oid] = _operation(
                row.action, cid, row.messages, summary, tag=row.role, ack=row.ack, reply=row.reply
            )
    missing = {op["channel"]["$ref"].rsplit("/", 1)[1] for op in ops.values()} - set(channel_ids)
    if missing:  # pragma: no cover - a wiring mistake in this module
        raise ValueError(f"operations on unknown channels: {sorted(missing)}")
    return ops


# --- the document ------------------------------------------------------------------------
def _topology(source: Settings | Topology) -> Topology:
    return source if isinstance(source, Topology) else Topology.from_settings(source)


def server(url: str, description: str) -> dict[str, Any]:
    """The AsyncAPI server of one broker URL: host, port and vhost, no credentials."""
    # split the masked URL: a password with an unencoded ``/`` would end up in the path
    parts = urlsplit(mask_url_safe(url))
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (5671 if parts.scheme == "amqps" else 5672)
    return {
        "host": f"{host}:{port}",
        "pathname": parts.path if len(parts.path) > 1 else "/",
        "protocol": parts.scheme or "amqp",
        "protocolVersion": "0.9.1",
        "description": description,
    }


def servers(settings: Settings | None) -> dict[str, Any]:
    """The configured broker's nodes (``MESH_AMQP_URL``), credentials masked; without
    `settings`, the default URL's."""
    if settings is None:
        # a bare `Topology` is documented with the default settings, whatever the env says
        urls = [default_of("amqp_url").get_secret_value()]
    else:
        urls = [u.get_secret_value() for u in settings.amqp_urls]
    out: dict[str, Any] = {}
    for i, url in enumerate(urls):
        node = f" (node {i + 1} of {len(urls)})" if len(urls) > 1 else ""
        out["amqp" if i == 0 else f"amqp{i + 1}"] = server(
            url, f"RabbitMQ{node}: {mask_url_safe(url)} (MESH_AMQP_URL)."
        )
    return out


def document(source: Settings | Topology) -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document of `source`'s namespace: with `Settings`, of its broker
    too (a `Topology` is documented with the default settings)."""
    topology = _topology(source)
    settings = source if isinstance(source, Settings) else None
    chans = channels(topology, settings.observer_queue_max_length if settings else None)
    return {
        "asyncapi": ASYNCAPI_VERSION,
        "info": {
            "title": TITLE,
            "version": version(),
            "description": f"The AMQP topology of namespace {topology.namespace!r} "
            f"({topology.queue_type} queues) and its wire contracts. Generated by "
            "`mesh asyncapi` from mesh/topology.py and schemas/; do not edit.",
            "license": {"name": "Apache-2.0"},
        },
        "defaultContentType": "application/json",
        "servers": servers(settings),
        "channels": chans,
        "operations": operations(topology, chans),
        "components": {
            "schemas": component_schemas(),
            "messages": component_messages(),
        },
        # what a worker does in Redis: keys, functions and steps (`mesh.redis_contract`)
        "x-mesh-redis": redis_contract.describe(topology.namespace),
    }


def render(source: Settings | Topology) -> bytes:
    """`document` as the committed file holds it: indented JSON, keys sorted."""
    return orjson.dumps(document(source), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


__all__ = ["document", "event_types", "render"]
