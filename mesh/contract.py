r"""Who sends and receives what: one table, read by `mesh.asyncapi` and `mesh.access.roles`.

Each `Row` is one operation of one role on one channel: the role (``client``, ``router``,
``worker``, ``registry``, ``observer``, ``operator``), the AsyncAPI channel id, send or
receive, the messages, the ack policy of a receive, and what the broker must allow for it
(`Publish`, `Consume`, `Own`). `mesh.asyncapi.operations` renders the documented rows;
`mesh.access.roles.grant_for` folds the granted rows of a role into its configure, write
and read regexes and its topic permissions. ``tests/unit/test_contract.py`` checks the
table against the topology: every channel it names exists, each grant matches the names
and keys the channel declares, and every declared exchange and queue has a row.

Pure: no I/O. Names come from `Topology`, as regex atoms of `mesh.access.patterns`
(escaped; `mesh.access.roles` anchors them). Not in the table: the ``admin`` role, whose
grant is the whole namespace (it covers the ``operator`` rows: ``mesh dlq`` runs as admin),
and the Redis ACLs of `mesh.access.roles`, which are about keys, not channels.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Literal

from mesh.access.patterns import (
    ANY_KEY,
    bands,
    binding_keys,
    dead_keys,
    dispatch_key_prefix,
    events_of,
    lit,
    reply_key_prefix,
    reply_key_regex,
    reply_queue_regex,
    retry_key_regex,
    session_key_prefix,
    starting,
)
from mesh.topology import DEAD_REASONS, OBSERVED_EVENTS, Topology

ContractRole = Literal["client", "router", "worker", "registry", "observer", "operator"]
Action = Literal["send", "receive"]
#: when a row happens: always, only under access control, or only without it (``open``:
#: no grant, the provisioned users are for access control)
When = Literal["always", "access", "open"]
#: rows repeated per channel of a family: each router queue and each agent queue (one per
#: priority band), each dead-letter reason
Each = Literal["router_queue", "agent_queue", "dead_reason"]


@dataclass(frozen=True, slots=True)
class Who:
    """The user a grant is for: its topology, broker user name and (worker) agent id."""

    topology: Topology
    user: str
    name: str = ""
    #: an observer's grant also binds events that carry request texts
    #: (`Settings.observer_reads_requests`)
    reads_requests: bool = False


Name = Callable[[Topology], str]
#: regex atoms (unanchored) of the names or routing keys a row needs, for one user
Atoms = Callable[[Who], Sequence[str]]


@dataclass(frozen=True, slots=True)
class Publish:
    """Write on `exchange`; on a topic exchange also topic-write on the routing `keys`
    (None: a direct exchange, no topic permission)."""

    exchange: Name
    keys: Atoms | None = None


@dataclass(frozen=True, slots=True)
class Consume:
    """Read on shared queues the topology declares (`queue`: their regex atom)."""

    queue: Callable[[Who], str]


@dataclass(frozen=True, slots=True)
class Bind:
    """Read on `exchange` and topic-read on the routing `keys` a queue binds it with."""

    exchange: Name
    keys: Atoms


@dataclass(frozen=True, slots=True)
class Own:
    """Queues the role declares for itself: configure, write and read on the names `queues`
    matches (a regex atom), plus every `Bind` their bindings need."""

    queues: Callable[[Who], str]
    binds: tuple[Bind, ...] = ()


Implies = Publish | Consume | Own


@dataclass(frozen=True, slots=True)
class Row:
    """One operation: `role` does `action` on the AsyncAPI channel `channel`."""

    role: ContractRole
    #: the AsyncAPI operation id is ``<role>.<op>`` (a family adds its member's suffix)
    op: str
    action: Action
    channel: str
    messages: tuple[str, ...]
    summary: str
    #: what the broker must allow (operator: covered by admin's namespace-wide grant)
    grant: Implies
    #: a receive: whether it acks (None: the AsyncAPI operation carries no ack binding)
    ack: bool | None = None
    #: a request's answer: (channel, messages)
    reply: tuple[str, tuple[str, ...]] | None = None
    when: When = "always"
    each: Each | None = None
    #: False: granted, but no AsyncAPI operation (see the row's comment)
    documented: bool = True

    @property
    def granted(self) -> bool:
        """Whether the role's provisioned grant carries this row."""
        return self.when != "open" and self.role != "operator"


def _instances(w: Who, queue: Callable[[str], str]) -> str:
    """A worker's own per-instance queues: instance ids start ``<agent_id>-``."""
    return starting(queue(f"{w.name}-"))


# --- names the rows use --------------------------------------------------------------------
#: the `Topology` exchange of each row (a property read, e.g. ``Topology.events``)
_ingress: Name = attrgetter("ingress")
_capabilities: Name = attrgetter("capabilities")
_control: Name = attrgetter("control")
_registry: Name = attrgetter("registry")
_sessions: Name = attrgetter("sessions")
_replies: Name = attrgetter("replies")
_results: Name = attrgetter("results")
_feedback: Name = attrgetter("feedback")
_human: Name = attrgetter("human")
_bids: Name = attrgetter("bids")
_events: Name = attrgetter("events")
_retry: Name = attrgetter("retry")
_dlx: Name = attrgetter("dlx")


def _any_key(_: Who) -> Sequence[str]:
    return (ANY_KEY,)


def _observed(w: Who) -> Sequence[str]:
    return (ANY_KEY,) if w.reads_requests else binding_keys(OBSERVED_EVENTS)


def _dead_letter_keys(w: Who) -> Sequence[str]:
    return (dead_keys(w.topology),)


def _dead_letters() -> Publish:
    return Publish(_dlx, _dead_letter_keys)


def _bid_keys(w: Who) -> Sequence[str]:
    return (starting(w.topology.bid_key("")),)


REGISTRY_IN = ("registration", "agentCard", "heartbeat", "heartbeatBatch", "deregistration")
SESSION_IN = ("registrationAck", "registrationError", "leaseLost")

# --- the table -----------------------------------------------------------------------------
# Within a role, rows are in the order its regexes list the names (docs/security.md's table).
TABLE: tuple[Row, ...] = (
    # client
    Row(
        "client",
        "sendTask",
        "send",
        "exchange.ingress",
        ("task",),
        "Submit a task",
        Publish(_ingress),
        reply=("queue.reply", ("result",)),
    ),
    Row(
        "client",
        "sendFeedback",
        "send",
        "exchange.feedback",
        ("feedback",),
        "Feedback on a task",
        Publish(_feedback),
    ),
    Row(
        "client",
        "receiveResult",
        "receive",
        "queue.reply",
        ("result",),
        "Results of its tasks",
        # by exact name: ``<ns>.reply.<user>.<id>``, an id without dots (user ``web``
        # must not read or bind ``web.eu``'s queues)
        Own(
            lambda w: reply_queue_regex(w.topology, w.user),
            (Bind(_replies, lambda w: (reply_key_regex(w.topology, w.user),)),),
        ),
        ack=True,
    ),
    # router
    Row(
        "router",
        "sendDispatch",
        "send",
        "exchange.capabilities",
        ("task",),
        "Dispatch to the chosen agent",
        Publish(_capabilities, lambda w: (starting(dispatch_key_prefix(w.topology)),)),
    ),
    Row(
        "router",
        "sendEvent",
        "send",
        "exchange.events",
        ("event",),
        "task.*, route.* events",
        Publish(_events, lambda w: (events_of("task", "route", "alert"),)),
    ),
    Row(
        "router",
        "sendDeadLetter",
        "send",
        "exchange.dlx.dead",
        ("deadLetter",),
        "Invalid, unroutable, expired tasks",
        _dead_letters(),
    ),
    Row(
        "router",
        "sendResult",
        "send",
        "exchange.replies",
        ("result",),
        "Results to callers (errors, and stored Results under access control)",
        Publish(_replies, lambda w: (starting(reply_key_prefix(w.topology)),)),
    ),
    Row(
        "router",
        "sendBidRequest",
        "send",
        "exchange.control.agent",
        ("bidRequest",),
        "Call for bids",
        Publish(_control, lambda w: (starting(w.topology.control_agent_key("")),)),
    ),
    # granted for the per-instance control messages to come (drain, cancel): nothing
    # sends on this channel yet, so no AsyncAPI operation
    Row(
        "router",
        "sendInstanceControl",
        "send",
        "exchange.control.instance",
        (),
        "Control messages to one instance (reserved)",
        Publish(_control, lambda w: (starting(w.topology.instance_key("")),)),
        documented=False,
    ),
    Row(
        "router",
        "sendHumanTask",
        "send",
        "exchange.human",
        ("humanTask",),
        "Tasks no agent scored above the threshold for, to a person (no fallback agent)",
        Publish(_human),
    ),
    Row(
        "router",
        "receiveTask",
        "receive",
        "queue.router",
        ("task", "retriedTask"),
        "Tasks to route, and dispatches back from agent queues",
        Consume(lambda w: "(?:" + "|".join(lit(q) for q, _ in w.topology.router_queues()) + ")"),
        ack=True,
        each="router_queue",
    ),
    Row(
        "router",
        "receiveEvents",
        "receive",
        "queue.selector",
        ("event",),
        "Outcomes to learn from",
        Own(lambda w: starting(w.topology.selector_queue("")), (Bind(_events, _any_key),)),
        ack=False,
    ),
    Row(
        "router",
        "receiveAgentEvents",
        "receive",
        "queue.snapshot",
        ("event",),
        "agent.* events of the snapshot",
        Own(lambda w: starting(w.topology.snapshot_queue("")), (Bind(_events, _any_key),)),
        ack=False,
    ),
    Row(
        "router",
        "receiveBid",
        "receive",
        "queue.bids",
        ("bid",),
        "Bids",
        Own(lambda w: starting(w.topology.bid_queue("")), (Bind(_bids, _bid_keys),)),
        ack=False,
    ),
    Row(
        "router",
        "receiveResultNotice",
        "receive",
        "queue.results",
        ("resultNotice",),
        "Workers' result notices",
        Consume(lambda w: lit(w.topology.results)),
        ack=True,
    ),
    # `mesh human take` runs with the router's credentials under access control: the answer
    # is a Result to a caller, which only a router's user may send
    Row(
        "router",
        "receiveHumanTask",
        "receive",
        "queue.human",
        ("humanTask",),
        "`mesh human take`: the next task for a person",
        Consume(lambda w: lit(w.topology.human)),
        ack=True,
    ),
    Row(
        "router",
        "receiveChildResult",
        "receive",
        "queue.reply",
        ("result",),
        "Results of the child tasks of compound requests (one shared reply queue)",
        Own(
            lambda w: reply_queue_regex(w.topology, w.user),
            (Bind(_replies, lambda w: (reply_key_regex(w.topology, w.user),)),),
        ),
        ack=True,
    ),
    Row(
        "router",
        "receiveFeedback",
        "receive",
        "queue.feedback",
        ("feedback",),
        "Callers' feedback",
        Consume(lambda w: lit(w.topology.feedback)),
        ack=True,
    ),
    # worker (of agent `Who.name`)
    Row(
        "worker",
        "sendRegistry",
        "send",
        "exchange.registry",
        REGISTRY_IN,
        "Register, heartbeat, deregister",
        Publish(_registry),
        reply=("queue.session", ("registrationAck", "registrationError")),
    ),
    Row(
        "worker",
        "sendHandoff",
        "send",
        "exchange.ingress",
        ("task",),
        "A child task (`ctx.handoff`)",
        Publish(_ingress),
    ),
    Row(
        "worker",
        "sendResultNotice",
        "send",
        "exchange.results",
        ("resultNotice",),
        "Outcome notice (access control)",
        Publish(_results),
        when="access",
    ),
    Row(
        "worker",
        "sendRetry",
        "send",
        "exchange.retries",
        ("retriedTask",),
        "Retry a task later",
        Publish(_retry, lambda w: (retry_key_regex(w.topology, w.name),)),
    ),
    Row(
        "worker",
        "sendEvent",
        "send",
        "exchange.events",
        ("event",),
        "task.* outcomes, alert.loop",
        Publish(_events, lambda w: (events_of("task", "route", "alert"),)),
    ),
    Row(
        "worker",
        "sendDeadLetter",
        "send",
        "exchange.dlx.dead",
        ("deadLetter",),
        "Invalid deliveries, tasks out of retries or hops",
        _dead_letters(),
    ),
    Row("worker", "sendBid", "send", "exchange.bids", ("bid",), "A bid", Publish(_bids, _bid_keys)),
    Row(
        "worker",
        "sendResult",
        "send",
        "exchange.replies",
        ("result",),
        "Results to callers (no access control)",
        Publish(_replies, lambda w: (starting(reply_key_prefix(w.topology)),)),
        when="open",
    ),
    Row(
        "worker",
        "receiveTask",
        "receive",
        "queue.agent",
        ("task", "retriedTask"),
        "Tasks of its agent",
        Consume(lambda w: lit(w.topology.agent_queue(w.name)) + bands()),
        ack=True,
        each="agent_queue",
    ),
    Row(
        "worker",
        "receiveSession",
        "receive",
        "queue.session",
        SESSION_IN,
        "The registry's answers",
        Own(
            lambda w: _instances(w, w.topology.session_queue),
            (Bind(_sessions, lambda w: (starting(session_key_prefix(w.topology, w.name)),)),),
        ),
        ack=False,
    ),
    Row(
        "worker",
        "receiveBidRequest",
        "receive",
        "queue.instance",
        ("bidRequest",),
        "Calls for bids",
        Own(
            lambda w: _instances(w, w.topology.instance_queue),
            (
                Bind(
                    _control,
                    lambda w: (
                        lit(w.topology.control_agent_key(w.name)),
                        starting(w.topology.instance_key(f"{w.name}-")),
                    ),
                ),
            ),
        ),
        ack=False,
    ),
    Row(
        "worker",
        "receiveResult",
        "receive",
        "queue.reply",
        ("result",),
        "Results of its handoffs (a MeshClient named after the instance)",
        Own(
            lambda w: reply_queue_regex(w.topology, w.user, w.name),
            (Bind(_replies, lambda w: (reply_key_regex(w.topology, w.user, w.name),)),),
        ),
        ack=True,
    ),
    # registry
    Row(
        "registry",
        "sendEvent",
        "send",
        "exchange.events",
        ("event",),
        "agent.up/down/leases",
        Publish(_events, lambda w: (events_of("agent"),)),
    ),
    Row(
        "registry",
        "sendSession",
        "send",
        "exchange.sessions",
        SESSION_IN,
        "Answers to an instance",
        Publish(_sessions, lambda w: (starting(session_key_prefix(w.topology)),)),
    ),
    Row(
        "registry",
        "sendDeadLetter",
        "send",
        "exchange.dlx.dead",
        ("deadLetter",),
        "Invalid registry messages",
        _dead_letters(),
    ),
    Row(
        "registry",
        "receive",
        "receive",
        "queue.registry",
        REGISTRY_IN,
        "Registry messages",
        Consume(lambda w: lit(w.topology.registry)),
        ack=False,
    ),
    # observer (`mesh observer`)
    Row(
        "observer",
        "sendAlert",
        "send",
        "exchange.events",
        ("event",),
        "alert.* raised and cleared (its queue: <ns>.observer.<user>.<name>, bound on #)",
        Publish(_events, lambda w: (events_of("alert"),)),
    ),
    # the observer's queue is named after its broker user and `Settings.observer_name`;
    # it binds only events without request texts (`OBSERVED_EVENTS`) unless its grant
    # allows them (docs/security.md: the observer reads decisions and figures, no texts)
    Row(
        "observer",
        "receiveEvents",
        "receive",
        "queue.observer",
        ("event",),
        "task.*, agent.*, alert.*, route.feedback; every event with observer_reads_requests",
        Own(
            lambda w: starting(w.topology.observer_queue_prefix(w.user)),
            (Bind(_events, _observed),),
        ),
    ),
    # `mesh events` (run with the observer's login): a queue of its own under the prefix
    Row(
        "observer",
        "receiveEventTail",
        "receive",
        "queue.observer.events",
        ("event",),
        "`mesh events`: the events its --filter patterns select",
        Own(
            lambda w: starting(w.topology.observer_queue_prefix(w.user)),
            (Bind(_events, _observed),),
        ),
    ),
    # operator (`mesh dlq`, as admin)
    Row(
        "operator",
        "sendReplay",
        "send",
        "exchange.ingress",
        ("task",),
        "`mesh dlq replay`: resubmit",
        Publish(_ingress),
    ),
    Row(
        "operator",
        "sendInvalid",
        "send",
        "exchange.dlx.dead",
        ("deadLetter",),
        "`mesh dlq replay`: what is not an envelope goes to dead.invalid",
        _dead_letters(),
    ),
    Row(
        "operator",
        "receiveDead",
        "receive",
        "queue.dead",
        ("deadLetter",),
        "`mesh dlq list|replay {reason}`",
        Consume(
            lambda w: "(?:" + "|".join(lit(w.topology.dead_queue(r)) for r in DEAD_REASONS) + ")"
        ),
        each="dead_reason",
    ),
)


def rows_of(role: ContractRole) -> tuple[Row, ...]:
    """The rows of `role`, in table order."""
    return tuple(r for r in TABLE if r.role == role)


__all__ = [
    "TABLE",
    "Bind",
    "Consume",
    "Own",
    "Publish",
    "Row",
    "Who",
    "rows_of",
]
