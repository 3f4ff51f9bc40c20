"""The Redis half of a worker's contract, for workers not written with this package.

A worker commits its work in Redis, not on the wire: it claims a task, stores its Result
and applies side effects through the mesh's Redis functions (`mesh.functions`), each one
atomic with the fencing check. The AsyncAPI document carries this as its ``x-mesh-redis``
extension (`describe`), so an agent in another language (``agents/node/``) finds there
what it would otherwise only find in Python: every key it touches (templates from
`mesh.keys.Keys`), the name of every function it calls (with the library's digest), their
``KEYS`` and ``ARGV`` in order, their answers, and the steps of a worker from delivery to
ack.

Pure: no Redis, no I/O. The argument lists restate `mesh.dispatch.store.TaskStore`'s
calls; `tests/unit/test_redis_contract.py` runs them against the Python worker's.
"""

from __future__ import annotations

from typing import Any

from mesh.config import default_of
from mesh.dispatch import lua
from mesh.keys import Keys
from mesh.registry import fencing
from mesh.topology import DEFERRED_HEADER, DELAY_HEADER, event_routing_key

#: placeholders of the templates (AsyncAPI parameter style)
PREFIX = "{prefix}"
RECORDS = "{records}"

#: the key families a worker's task records use (`Keys.for_agent` under access control)
RECORD_KEYS: tuple[str, ...] = (
    "idem",
    "task",
    "task_history",
    "task_waiters",
    "processing",
    "trace_visits",
    "effect_done",
)
#: the mesh's own keys a worker's functions name (never in an agent's view)
MESH_KEYS: tuple[str, ...] = ("instance", "sealed", "side_effect")


def _template(keys: Keys, family: str, placeholder: str) -> str:
    """`family`'s key with AsyncAPI-style parameters, its tenant prefix as `placeholder`."""
    build = getattr(keys, family)
    params = {
        "idem": ("{taskId}",),
        "task": ("{taskId}",),
        "task_history": ("{taskId}",),
        "task_waiters": ("{taskId}",),
        "processing": (),
        "trace_visits": ("{traceId}",),
        "effect_done": ("{taskId}", "{name}"),
        "instance": ("{instanceId}",),
        "sealed": ("{agentId}", "{taskId}"),
        "side_effect": ("{name}",),
    }[family]
    key: str = build(*params)
    return placeholder + key[len(keys.prefix) :]


def key_templates(namespace: str = "mesh") -> dict[str, str]:
    """Every key a worker's functions name: ``{records}...`` (its task records) and
    ``{prefix}...`` (the mesh's own)."""
    keys = Keys(namespace)
    out = {family: _template(keys, family, RECORDS) for family in RECORD_KEYS}
    out |= {family: _template(keys, family, PREFIX) for family in MESH_KEYS}
    out["instance_prefix"] = PREFIX + keys.instance_prefix()[len(keys.prefix) :]
    return out


def functions() -> dict[str, Any]:
    """The functions a worker calls: name, KEYS and ARGV in order, and the answers."""
    d = lua.LIBRARY
    holder = [
        "ttl_ms: the idempotency TTL (MESH_IDEMPOTENCY_TTL_S * 1000)",
        "instance_prefix: the key `instance_prefix`",
        "instance_id: this instance",
        "token: this instance's fencing token (RegistrationAck.token)",
        "fenced: '1' (an instance with a lease)",
    ]
    return {
        "claim": {
            "name": d.function_name("claim"),
            "when": "before running a delivered task",
            "keys": ["idem", "task", "task_history", "processing", "trace_visits"],
            "args": [
                *holder,
                "redelivered: '1' when the broker redelivered the message, else '0'",
                "lifetime_end_ms: now + MESH_MAX_TASK_LIFETIME_S * 1000",
                "agent_id",
                "count_visit: '1' when the envelope's attempt is 0 (loop detection)",
                "pristine: '1' for a first delivery of a first dispatch (not redelivered, "
                f"attempt 0, reroutes 0, no {DEFERRED_HEADER} header)",
                "trace_id",
            ],
            "returns": {
                "claimed": "['claimed', takeover '0'|'1', visits, recovered '0'|'1']: run it",
                "done": "['done', result_json, replied '0'|'1']: answered before; ack "
                "(and reply with result_json when replied is '0')",
                "busy": "['busy', holder]: another live instance runs it; hand it back "
                "through the retry exchange and look again later",
                "stale": "['stale']: this token's lease is gone; re-register, then claim "
                "again with the new token",
                "refused": "['refused', state]: the task cannot move to processing; ack",
            },
        },
        "finish": {
            "name": d.function_name("finish"),
            "when": "to commit the terminal Result: only an 'ok' may answer the callers",
            "keys": [
                "idem",
                "task",
                "task_history",
                "task_waiters; under access control the key `idem` again (the waiters "
                "are not the worker's to read)",
                "processing",
                "sealed: only under access control",
            ],
            "args": [
                *holder,
                "result_json: the Result (schema Result)",
                "by: this instance",
                "note: the error code, or ''",
                "agent_id",
                "quiet: '0'",
                "state: the Result's status",
            ],
            "returns": {
                "ok": "['ok', waiter...]: committed (a task record lost under the live "
                "claim is recovered first: accepted, processing, marked recovered); answer "
                "each waiter (a reply queue, "
                "then \\u001f and the correlation_id to echo, when the caller set one) "
                "and the envelope's reply_to; under access control publish the Result "
                "to the results exchange instead (message_id 'result:<task_id>': the "
                "router reads the task_id there, else in the body), and a router answers",
                "done": "['done', result_json]: another commit won; ack",
                "stale": "['stale']: the fencing token is refused; nothing is answered, "
                "hand the delivery back",
                "refused": "['refused', state]: ack",
            },
        },
        "release": {
            "name": d.function_name("release"),
            "when": "to give a claim back (a retry, a reject, a frozen handler)",
            "keys": ["idem", "task", "task_history", "processing"],
            "args": [
                "ttl_ms",
                "instance_id",
                "token",
                "by: this instance",
                "note",
                "state...: 'retrying' or 'rerouting'",
            ],
            "returns": {"ok": "['ok']", "stale": "['stale']", "refused": "['refused', state]"},
        },
        "apply_once": {
            "name": d.function_name("apply_once"),
            "when": "before a side effect of a claimed task (exactly once per task)",
            "keys": ["idem", "effect_done", "side_effect", "task"],
            "args": [*holder, "amount: what to add to the counter `side_effect`"],
            "returns": {
                "1": "applied: do the side effect",
                "0": "this task applied it before: skip it",
                "-1": "stale token: refused",
                "-2": "the task's record was recovered after a loss: refused",
            },
        },
        "check": {
            "name": fencing.LIBRARY.function_name("check"),
            "when": "to ask whether the token is still current (`ctx.fence()`)",
            "keys": ["instance"],
            "args": ["token"],
            "returns": {"-1": "current", "other": "stale: the instance's current token, 0: none"},
        },
    }


def describe(namespace: str = "mesh") -> dict[str, Any]:
    """The ``x-mesh-redis`` extension of the AsyncAPI document."""
    return {
        "description": (
            "What a worker does in Redis (MESH_REDIS_URL), through the mesh's Redis "
            "functions only (FCALL; no role may EVAL). The registry, the routers and "
            "`mesh access provision` load the libraries; a worker that gets 'Function not "
            "found' hands the delivery back and tries later."
        ),
        "prefix": (
            "`{prefix}` is the tenant prefix: the namespace in the vhost '/' "
            f"('{namespace}'), '<vhost, %-encoded>/<namespace>' in any other vhost. "
            "`{records}` is the prefix of a worker's task records: `{prefix}` without "
            "access control, `{prefix}:agent/{agentId}/` with it (MESH_ACCESS_CONTROL: the "
            "agent's view, the only task records its Redis user may touch)."
        ),
        "namespace": namespace,
        "settings": {
            "MESH_IDEMPOTENCY_TTL_S": default_of("idempotency_ttl_s"),
            "MESH_MAX_TASK_LIFETIME_S": default_of("max_task_lifetime_s"),
            "MESH_ACCESS_CONTROL": default_of("access_control"),
        },
        "keys": key_templates(namespace),
        "functions": functions(),
        "worker": [
            "Register: publish a Registration (AMQP type 'register', reply_to the "
            "instance's session queue, a correlation_id, user_id the broker login) to the "
            "registry exchange; the RegistrationAck carries the fencing token and the "
            "heartbeat interval. Heartbeat (type 'heartbeat') every heartbeat_s; "
            "'lease.lost' on the session queue means: register again (a new token).",
            "Consume the agent queue(s) with manual acks. For each delivery: decode the "
            "TaskEnvelope; an unreadable body is acked (the Python worker dead-letters it).",
            "FCALL claim; only 'claimed' runs the handler.",
            "The deadline: deadline_ms already past -> an 'expired' Result with code "
            "'expired_in_queue' (not executed); else the handler is cancelled at "
            "deadline_ms -> 'expired' with code 'deadline_passed'.",
            "FCALL finish with the Result; on 'ok' answer the callers (see finish), then "
            "ack. On 'stale' answer nobody and hand the delivery back.",
            "Hand back / retry: publish the envelope (attempt + 1 for a retry) to the "
            f"retries exchange with key '<delay>.agent.<agentId>' and header {DELAY_HEADER} "
            f"(a hand-back also {DEFERRED_HEADER}: this instance), FCALL release for a "
            "retry, then ack the delivery.",
            "Outcome: an Event of type 'task.<status>' on the events exchange, keyed "
            f"'{event_routing_key('task.<status>', '<route.router>')}' (the envelope's "
            "RouteInfo.router: the router that dispatched the task counts it), or "
            f"'{event_routing_key('task.<status>', None)}' when it has none.",
            "Stop: publish a Deregistration (type 'deregister').",
        ],
    }


__all__ = ["describe", "functions", "key_templates"]
