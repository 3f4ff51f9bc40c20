"""The AMQP topology of docs/design.md section 3: every exchange and queue name is built here.

One list of specs serves both idempotent declaration (`declare`) and the RabbitMQ
definitions export (`definitions`), so the two cannot drift. No other module formats
``"mesh.agent."`` or any other wire name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import aiormq.exceptions
from aio_pika.abc import AbstractChannel, AbstractExchange, ExchangeType

from mesh.config import default_of
from mesh.errors import ConfigError

DeadReason = Literal["invalid", "unroutable", "hops", "retries", "expired"]
DEAD_REASONS: tuple[DeadReason, ...] = ("invalid", "unroutable", "hops", "retries", "expired")

#: header carrying the reason of a dead letter
REASON_HEADER = "x-mesh-reason"
#: header carrying the retry delay a republished task waited (for reading: the routing key,
#: `Topology.retry_key`, is what sends it to its delay queue)
DELAY_HEADER = "mesh-delay"
#: header of a task a worker deferred or handed back (the holder it waited on, or itself):
#: such a copy may have run before, so a claim never takes it for a first delivery
DEFERRED_HEADER = "x-mesh-deferred"
#: header of a retried task: the error of the attempt before (at most 1000 characters)
LAST_ERROR_HEADER = "x-mesh-last-error"
#: header of a dead letter: JSON details of why (the bad fields, the last error...)
DETAILS_HEADER = "x-mesh-details"
#: headers of an invalid body kept in ``dead.invalid``: its full size and SHA-256, and
#: ``true`` when only its first `INVALID_KEEP_BYTES` were kept
SIZE_HEADER = "x-mesh-size"
SHA256_HEADER = "x-mesh-sha256"
TRUNCATED_HEADER = "x-mesh-truncated"
#: how much of an invalid body ``dead.invalid`` keeps (anyone can publish garbage)
INVALID_KEEP_BYTES = 64 * 1024
#: registry A2A registrations: headers naming the instance, agent and concurrency
INSTANCE_HEADER = "x-mesh-instance-id"
AGENT_HEADER = "x-mesh-agent-id"
CONCURRENCY_HEADER = "x-mesh-max-concurrency"
#: header of an events message that carries a batch (`EventBatch`: every event of it has
#: the message's routing key): the number of events; a message without it is one `Event`
BATCH_HEADER = "x-mesh-batch"
#: the largest body of one batch message: an event that would make it larger starts the
#: next one (well under the decoder's limit, `mesh.schemas.codec.ENVELOPE_OVERHEAD_BYTES`)
EVENT_BATCH_MAX_BYTES = 256 * 1024
#: envelope priorities 1..10 (the AMQP priority property carries the same number; no queue
#: is a priority queue: the band a priority falls in is, `priority_band`)
MAX_PRIORITY = 10
#: binding keys of an observer's queue that carry no request text (``route.decision`` and
#: ``route.learned`` do): under access control its grant allows these, and ``#`` only with
#: ``MESH_OBSERVER_READS_REQUESTS`` (docs/security.md: no request texts unless a setting allows)
#: the routing key of a ``route.decision`` without the request's text, what a router sends
#: under access control unless MESH_OBSERVER_READS_REQUESTS (`decision_routing_key`)
REDACTED_DECISION_KEY = "route.decision.redacted"
OBSERVED_EVENTS: tuple[str, ...] = (
    "task.#",
    "agent.#",
    "alert.#",
    "route.feedback",
    REDACTED_DECISION_KEY,
)
#: every event: an observer's binding without access control, or allowed request texts
ALL_EVENTS: tuple[str, ...] = ("#",)
#: headers of a task in the human queue: the best score, the threshold it missed, and the
#: code of why no agent took it (`mesh.router.reasons`)
SCORE_HEADER = "x-mesh-score"
THRESHOLD_HEADER = "x-mesh-threshold"
CODE_HEADER = "x-mesh-code"
#: how long a task's copy waits in the human queue (x-message-ttl): its record in Redis,
#: which `mesh human` reads, lives `idempotency_ttl_s` (default the same 24 h)
HUMAN_COPY_TTL_MS = 86_400_000
#: the priority bands, highest first, with their default weights (5:3:1;
#: `Settings.priority_weights` sets them): in both queue modes the router queue and each
#: agent queue are one queue per band, and a consumer drains its bands by weight
#: (`mesh.wire.bands`), so a flood of one band never starves another
PRIORITY_BANDS: tuple[tuple[str, int], ...] = (("high", 5), ("normal", 3), ("low", 1))
#: the band of an ingress publish that names none (the bare `Topology.ingress_key`)
DEFAULT_BAND = "normal"


def redacts_decisions(access_control: bool, observer_reads_requests: bool) -> bool:
    """Do a router's ``route.decision`` events leave the request text out (and travel as
    `REDACTED_DECISION_KEY`, which an observer's narrow grant binds)?"""
    return access_control and not observer_reads_requests


def batched_event(event_type: str) -> bool:
    """May an event of `event_type` wait a moment to travel with others of its routing key
    (`mesh.event_batch`)? The per-task ones: ``task.*`` (outcomes learned by the routers'
    breakers and success rates a window later, which they tolerate) and ``route.decision``.
    ``agent.*`` (membership), ``alert.*`` and the routers' periodic ``route.*`` exchanges
    (already one message per round) go at once."""
    return event_type.startswith("task.") or event_type == "route.decision"


def event_routing_key(event_type: str, router: str | None) -> str:
    """Routing key of a ``task.*`` event a worker publishes: the dispatching router's tag
    (``RouteInfo.router``) as its last word, so that router alone binds its outcomes;
    observers bind ``task.#``."""
    return f"{event_type}.{router}" if router else event_type


def event_type_bindings(pattern: str) -> tuple[str, ...]:
    """Binding keys that select the events whose *type* matches the topic `pattern`: the
    pattern itself and, for the router tag a ``task.*`` event's key may end with
    (`event_routing_key`), the same pattern with one more word."""
    if pattern == "route.decision":
        return (pattern, REDACTED_DECISION_KEY)
    tagged = pattern.split(".", 1)[0] in ("task", "*") and not pattern.endswith("#")
    return (pattern, f"{pattern}.*") if tagged else (pattern,)


def priority_band(priority: int) -> str:
    """Band of an envelope priority: 8-10 high, 4-7 normal, 1-3 low."""
    if priority >= 8:
        return "high"
    if priority >= 4:
        return "normal"
    return "low"


@dataclass(frozen=True, slots=True)
class ExchangeSpec:
    name: str
    type: ExchangeType
    internal: bool = False
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class QueueSpec:
    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    durable: bool = True
    exclusive: bool = False
    auto_delete: bool = False


@dataclass(frozen=True, slots=True)
class BindingSpec:
    exchange: str
    queue: str
    routing_key: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class TopologySpec:
    exchanges: tuple[ExchangeSpec, ...] = ()
    queues: tuple[QueueSpec, ...] = ()
    bindings: tuple[BindingSpec, ...] = ()

    def __add__(self, other: TopologySpec) -> TopologySpec:
        return TopologySpec(
            self.exchanges + other.exchanges,
            self.queues + other.queues,
            self.bindings + other.bindings,
        )


_setting = default_of


@dataclass(frozen=True, slots=True)
class Topology:
    """Names and declarations for one namespace (``Topology.from_settings(settings)``)."""

    # the defaults are the settings' (`Settings.namespace`...; `mode` is `Settings.topology`)
    namespace: str = _setting("namespace")
    queue_type: Literal["classic", "quorum"] = _setting("queue_type")
    delivery_limit: int = _setting("delivery_limit")
    retry_delays_ms: tuple[int, ...] = _setting("retry_delays_ms")
    #: weight of each of `PRIORITY_BANDS` (high, normal, low) when bands contend
    priority_weights: tuple[int, ...] = _setting("priority_weights")
    dead_letter_max_length: int = _setting("dead_letter_max_length")
    dead_letter_ttl_s: int = _setting("dead_letter_ttl_s")
    #: ``passive``: `declare` only checks that the objects exist (the admin applied them)
    mode: Literal["apply", "passive"] = _setting("topology")

    @classmethod
    def from_settings(cls, settings: Any) -> Topology:
        return cls(
            namespace=settings.namespace,
            queue_type=settings.queue_type,
            delivery_limit=settings.delivery_limit,
            retry_delays_ms=tuple(sorted(set(settings.retry_delays_ms))),
            priority_weights=tuple(
                getattr(settings, "priority_weights", _setting("priority_weights"))
            ),
            dead_letter_max_length=settings.dead_letter_max_length,
            dead_letter_ttl_s=settings.dead_letter_ttl_s,
            mode=getattr(settings, "topology", _setting("topology")),
        )

    # --- names ---------------------------------------------------------------------------
    @property
    def ingress(self) -> str:
        """Exchange (direct) clients publish envelopes to."""
        return f"{self.namespace}.ingress"

    def router_band_queue(self, band: str) -> str:
        """Queue of one priority band of the routers' intake (competing consumers)."""
        return f"{self.namespace}.router.{band}"

    def router_queues(self) -> list[tuple[str, int]]:
        """(queue, weight) pairs every router consumes, highest priority first."""
        return [(self.router_band_queue(b), w) for b, w in self.bands()]

    @property
    def router_queue(self) -> str:
        """The routers' queue of the default band: every router consumes each of
        `router_queues`, so this one's consumers are the routers (health, `NoRouter`)."""
        return self.router_band_queue(DEFAULT_BAND)

    @property
    def legacy_router_queue(self) -> str:
        """The single router queue of releases before the bands: still bound to ingress, it
        keeps a copy of every task published with the bare key until it is deleted
        (README: Priorities, upgrading)."""
        return f"{self.namespace}.router"

    @property
    def ingress_key(self) -> str:
        """The bare ingress key: lands in the default band (`ingress_band_key` names one)."""
        return "task"

    def ingress_band_key(self, priority: int) -> str:
        """Ingress key of a task of `priority`: ``task.<band>``, its band's router queue."""
        return f"{self.ingress_key}.{priority_band(priority)}"

    def bands(self) -> list[tuple[str, int]]:
        """(band, weight) of each priority band, highest first, with the configured weights."""
        return [
            (band, w) for (band, _), w in zip(PRIORITY_BANDS, self.priority_weights, strict=True)
        ]

    @property
    def capabilities(self) -> str:
        """Exchange (topic) routing envelopes to agent queues."""
        return f"{self.namespace}.capabilities"

    @property
    def control(self) -> str:
        """Exchange (topic) for per-instance control messages (bids, drain, cancel)."""
        return f"{self.namespace}.control"

    @property
    def registry(self) -> str:
        """Exchange (direct) and queue of the registry service."""
        return f"{self.namespace}.registry"

    @property
    def registry_key(self) -> str:
        return "registry"

    @property
    def events(self) -> str:
        """Exchange (topic) of lifecycle events."""
        return f"{self.namespace}.events"

    @property
    def retry(self) -> str:
        """Exchange (topic) feeding the retry delay queues, keyed `retry_key`: a topic
        permission can then tie a worker's retries to its own agent's dispatch key."""
        return f"{self.namespace}.retries"

    def retry_key(self, delay_ms: int, agent_id: str, priority: int = 5) -> str:
        """``<delay>.<dispatch key>``: the delay queue it waits in, then (the queue dead-
        letters it to the capabilities exchange with that key) the agent's queue."""
        return f"{delay_ms}.{self.agent_routing_key(agent_id, priority)}"

    @property
    def dlx(self) -> str:
        """Exchange (topic) of dead letters."""
        return f"{self.namespace}.dlx"

    def agent_queue(self, agent_id: str, band: str | None = None) -> str:
        """Queue of one priority band of a logical agent; without `band`, the name its band
        queues extend (an agent's single queue of releases before the bands)."""
        base = f"{self.namespace}.agent.{agent_id}"
        return base if band is None else f"{base}.{band}"

    def agent_queues(self, agent_id: str) -> list[tuple[str, int]]:
        """(queue, weight) pairs a worker of `agent_id` consumes, highest priority first."""
        return [(self.agent_queue(agent_id, band), w) for band, w in self.bands()]

    def agent_routing_key(self, agent_id: str, priority: int = 5) -> str:
        """Routing key of a dispatch to `agent_id` on the capabilities exchange."""
        return f"agent.{agent_id}.{priority_band(priority)}"

    def agent_of_routing_key(self, routing_key: str) -> str | None:
        """Inverse of `agent_routing_key` (None for a key that is not a dispatch key); a
        `retry_key` names its agent too."""
        delay, dot, rest = routing_key.partition(".")
        if dot and delay.isdigit():
            routing_key = rest
        if not routing_key.startswith("agent."):
            return None
        rest, _, band = routing_key[len("agent.") :].rpartition(".")
        if band not in {b for b, _ in PRIORITY_BANDS}:
            return None
        return rest or None

    def instance_queue(self, instance_id: str) -> str:
        """Exclusive control queue of one instance."""
        return f"{self.namespace}.instance.{instance_id}"

    def instance_key(self, instance_id: str) -> str:
        return f"instance.{instance_id}"

    def control_agent_key(self, agent_id: str) -> str:
        """Control routing key reaching every instance of `agent_id`."""
        return f"agent.{agent_id}"

    @property
    def sessions(self) -> str:
        """Topic exchange of registry answers to instances (`session_key`)."""
        return f"{self.namespace}.sessions"

    @staticmethod
    def session_key(agent_id: str, instance_id: str) -> str:
        """Routing key of registry answers to one instance: ``session.<agent>.<instance>``."""
        return f"session.{agent_id}.{instance_id}"

    def session_queue(self, instance_id: str) -> str:
        """Exclusive queue of one instance's registry session (acks, lease-lost notices)."""
        return f"{self.namespace}.session.{instance_id}"

    def snapshot_queue(self, snapshot_id: str) -> str:
        """Exclusive, auto-delete queue of one agent snapshot (a router's `agent.*` feed)."""
        return f"{self.namespace}.snapshot.{snapshot_id}"

    def selector_queue(self, router_id: str) -> str:
        """Exclusive queue of one router's selector, following outcome events."""
        return f"{self.namespace}.selector.{router_id}"

    def reply_queue(self, client_id: str) -> str:
        """Durable reply queue of one `MeshClient` (Results come back on it)."""
        return f"{self.namespace}.reply.{client_id}"

    def compound_queue(self, login: str) -> str:
        """Durable reply queue the routers (user `login`) share for the Results of the
        child tasks of compound requests (`mesh.router.compound`): one of that user's reply
        queues, so it comes through `replies` like any caller's."""
        return self.reply_queue(f"{login}.compound")

    @property
    def replies(self) -> str:
        """Topic exchange of Results to callers, keyed `reply_key` (no default exchange)."""
        return f"{self.namespace}.replies"

    def reply_key(self, reply_queue: str) -> str | None:
        """The key of `replies` that reaches a mesh reply queue (None: not one of ours)."""
        prefix = f"{self.namespace}."
        if not reply_queue.startswith(f"{prefix}reply."):
            return None
        return reply_queue[len(prefix) :]

    @property
    def results(self) -> str:
        """Exchange (direct) and queue of finished-task notices, workers -> routers: under
        access control a router, not the worker, answers the callers."""
        return f"{self.namespace}.results"

    results_key = "result"

    @property
    def feedback(self) -> str:
        """Exchange (direct) and queue of callers' feedback on their tasks, clients ->
        routers: under access control a router (which may write the example memory)
        applies it, and only from the task's own caller."""
        return f"{self.namespace}.feedback"

    feedback_key = "feedback"

    @property
    def human(self) -> str:
        """Exchange (direct) and durable queue of the tasks handed to a person (degradation
        level 2: nothing scored above the threshold and no fallback agent is configured);
        `mesh human` answers them."""
        return f"{self.namespace}.human"

    human_key = "human"

    @property
    def bids(self) -> str:
        """Topic exchange of bids, workers -> the router that called for them (`bid_key`)."""
        return f"{self.namespace}.bids"

    @staticmethod
    def bid_key(collector_id: str) -> str:
        """Routing key of the bids for one router's collector: ``bid.<collector_id>``."""
        return f"bid.{collector_id}"

    def bid_queue(self, collector_id: str) -> str:
        """Exclusive, auto-delete queue one router collects bids on."""
        return f"{self.namespace}.bids.{collector_id}"

    def observer_queue_prefix(self, user: str) -> str:
        """Queues an observer logged in as `user` declares for itself: ``<ns>.observer.<user>.``"""
        return f"{self.namespace}.observer.{user}."

    def observer_queue(self, user: str, name: str) -> str:
        """Durable queue of the observers named `name` (`Settings.observer_name`)."""
        return f"{self.observer_queue_prefix(user)}{name}"

    def events_queue(self, user: str, tail_id: str) -> str:
        """Exclusive queue of one `mesh events` tail: an observer queue of `user`'s."""
        return self.observer_queue(user, f"events-{tail_id}")

    def observer_spec(
        self, user: str, name: str, max_length: int, keys: Sequence[str] = ALL_EVENTS
    ) -> TopologySpec:
        """The observer's queue, bound to the events of `keys` (every event: ``#``),
        bounded: when the observer is behind, the oldest events are dropped (publishers are
        never held up)."""
        queue = self.observer_queue(user, name)
        args = {
            **self._queue_args(),
            "x-max-length": max_length,
            "x-overflow": "drop-head",
        }
        return TopologySpec(
            queues=(QueueSpec(queue, args),),
            bindings=tuple(BindingSpec(self.events, queue, key) for key in keys),
        )

    def retry_queue(self, delay_ms: int) -> str:
        return f"{self.namespace}.retry.{delay_ms}"

    def retry_delay_for(self, attempt: int) -> int:
        """Delay of retry number `attempt` (1-based): grows, then stays at the longest."""
        delays = self.retry_delays_ms
        return delays[min(max(attempt, 1), len(delays)) - 1]

    def dead_queue(self, reason: DeadReason) -> str:
        return f"{self.namespace}.dead.{reason}"

    def dead_key(self, reason: DeadReason) -> str:
        return f"dead.{reason}"

    def last_delivery(self, redelivered: bool, headers: Mapping[str, Any] | None) -> bool:
        """Is this delivery of one of this namespace's quorum queues its last? The broker
        drops the message (no dead-letter route on the router queues) once it comes back
        again. ``x-delivery-count`` is the queue's own count only on a redelivery (a first
        delivery can carry another queue's, dead-lettered with it, or a sender's)."""
        if self.queue_type != "quorum" or not redelivered or not headers:
            return False
        count = headers.get("x-delivery-count")
        return isinstance(count, int) and count >= self.delivery_limit

    # --- specs -----------------------------------------------------------------------------
    def _queue_args(self) -> dict[str, Any]:
        if self.queue_type == "quorum":
            return {"x-queue-type": "quorum", "x-delivery-limit": self.delivery_limit}
        return {}

    def _dead_letter_args(self) -> dict[str, Any]:
        """Bounded dead-letter queues: past `dead_letter_max_length` the broker refuses a
        letter (the sender counts and reports the drop), older ones than the TTL go."""
        args = {
            **self._queue_args(),
            "x-max-length": self.dead_letter_max_length,
            "x-overflow": "reject-publish",
        }
        if self.dead_letter_ttl_s:
            args["x-message-ttl"] = self.dead_letter_ttl_s * 1000
        return args

    def static_spec(self) -> TopologySpec:
        """Everything that exists once per namespace."""
        exchanges = (
            ExchangeSpec(self.ingress, ExchangeType.DIRECT),
            ExchangeSpec(self.capabilities, ExchangeType.TOPIC),
            ExchangeSpec(self.control, ExchangeType.TOPIC),
            ExchangeSpec(self.registry, ExchangeType.DIRECT),
            ExchangeSpec(self.sessions, ExchangeType.TOPIC),
            ExchangeSpec(self.replies, ExchangeType.TOPIC),
            ExchangeSpec(self.bids, ExchangeType.TOPIC),
            ExchangeSpec(self.results, ExchangeType.DIRECT),
            ExchangeSpec(self.feedback, ExchangeType.DIRECT),
            ExchangeSpec(self.human, ExchangeType.DIRECT),
            ExchangeSpec(self.events, ExchangeType.TOPIC),
            ExchangeSpec(self.retry, ExchangeType.TOPIC),
            ExchangeSpec(self.dlx, ExchangeType.TOPIC),
        )
        queues: list[QueueSpec] = [
            *(QueueSpec(name, self._queue_args()) for name, _ in self.router_queues()),
            QueueSpec(self.registry, self._queue_args()),
            QueueSpec(self.results, self._queue_args()),
            QueueSpec(self.feedback, self._queue_args()),
            QueueSpec(
                self.human,
                {**self._queue_args(), "x-message-ttl": HUMAN_COPY_TTL_MS},
            ),
        ]
        bindings: list[BindingSpec] = [
            # a publish that names no band lands in the default one
            BindingSpec(self.ingress, self.router_queue, self.ingress_key),
            *self._router_band_bindings(),
            BindingSpec(self.registry, self.registry, self.registry_key),
            BindingSpec(self.results, self.results, self.results_key),
            BindingSpec(self.feedback, self.feedback, self.feedback_key),
            BindingSpec(self.human, self.human, self.human_key),
        ]
        for delay in self.retry_delays_ms:
            name = self.retry_queue(delay)
            args = {
                **self._queue_args(),
                "x-message-ttl": delay,
                "x-dead-letter-exchange": self.capabilities,
            }
            queues.append(QueueSpec(name, args))
            bindings.append(BindingSpec(self.retry, name, f"{delay}.#"))
        for reason in DEAD_REASONS:
            name = self.dead_queue(reason)
            queues.append(QueueSpec(name, self._dead_letter_args()))
            bindings.append(BindingSpec(self.dlx, name, self.dead_key(reason)))
        return TopologySpec(exchanges, tuple(queues), tuple(bindings))

    def _router_band_bindings(self) -> list[BindingSpec]:
        bindings = []
        for band, _ in PRIORITY_BANDS:
            queue = self.router_band_queue(band)
            bindings += [
                BindingSpec(self.ingress, queue, f"{self.ingress_key}.{band}"),
                # dispatches that expired or were rejected in an agent queue come back to
                # a router, in their band, which reroutes them (or ends them) --
                # docs/design.md section 7; and retried ones, whose key still has the delay
                # (`retry_key`)
                BindingSpec(self.dlx, queue, f"agent.#.{band}"),
                BindingSpec(self.dlx, queue, f"*.agent.#.{band}"),
            ]
        return bindings

    def agent_spec(self, agent_id: str) -> TopologySpec:
        """The queues of one logical agent (one per priority band) and their bindings."""
        args = {**self._queue_args(), "x-dead-letter-exchange": self.dlx}
        # each queue takes its dispatch key, and the same key behind a retry delay (a
        # retried task comes back from its delay queue with `retry_key`)
        queues = []
        bindings = []
        for band, _ in PRIORITY_BANDS:
            name = self.agent_queue(agent_id, band)
            key = f"agent.{agent_id}.{band}"
            queues.append(QueueSpec(name, args))
            bindings.append(BindingSpec(self.capabilities, name, key))
            bindings.append(BindingSpec(self.capabilities, name, f"*.{key}"))
        return TopologySpec(queues=tuple(queues), bindings=tuple(bindings))

    def instance_spec(self, agent_id: str, instance_id: str) -> TopologySpec:
        """The exclusive control queue of one instance."""
        name = self.instance_queue(instance_id)
        return TopologySpec(
            queues=(QueueSpec(name, durable=False, exclusive=True, auto_delete=True),),
            bindings=(
                BindingSpec(self.control, name, self.instance_key(instance_id)),
                BindingSpec(self.control, name, self.control_agent_key(agent_id)),
            ),
        )

    # --- declaration -----------------------------------------------------------------------
    async def declare(
        self, channel: AbstractChannel, spec: TopologySpec | None = None, *, apply: bool = False
    ) -> None:
        """Declare `spec` (default: the static topology); idempotent.

        In ``passive`` mode (and without `apply`, which `mesh topology apply` passes) the
        objects are only checked: a missing one raises `ConfigError` naming it and the
        command that creates it, and no configure permission is needed.
        """
        spec = spec or self.static_spec()
        if self.mode == "passive" and not apply:
            await check_spec(channel, spec, self.apply_hint(spec))
        else:
            await declare_spec(channel, spec)

    def apply_hint(self, spec: TopologySpec) -> str:
        """The command that creates `spec` (an agent's queues need its id)."""
        prefix = f"{self.namespace}.agent."
        bands = tuple(f".{band}" for band, _ in PRIORITY_BANDS)
        agents = set()
        for q in spec.queues:
            if q.name.startswith(prefix):
                agent = q.name[len(prefix) :]
                if agent.endswith(bands):
                    agent = agent.rsplit(".", 1)[0]
                agents.add(agent)
        extra = "".join(f" --agent {a}" for a in sorted(agents))
        return f"MESH_NAMESPACE={self.namespace} mesh topology apply{extra}"

    def definitions(self, rabbit_version: str = "3.10.8") -> dict[str, Any]:
        """The static topology in RabbitMQ's definitions format (`import_definitions`)."""
        return spec_definitions(self.static_spec(), rabbit_version)


async def declare_spec(channel: AbstractChannel, spec: TopologySpec) -> None:
    """Declare every exchange, queue and binding of `spec` on `channel`."""
    exchanges: dict[str, AbstractExchange] = {}
    for ex in spec.exchanges:
        exchanges[ex.name] = await channel.declare_exchange(
            ex.name, ex.type, durable=True, internal=ex.internal, arguments=dict(ex.arguments)
        )
    queues = {}
    for q in spec.queues:
        queues[q.name] = await channel.declare_queue(
            q.name,
            durable=q.durable,
            exclusive=q.exclusive,
            auto_delete=q.auto_delete,
            arguments=dict(q.arguments),
        )
    for b in spec.bindings:
        exchange: AbstractExchange | str = exchanges.get(b.exchange, b.exchange)
        await queues[b.queue].bind(exchange, routing_key=b.routing_key, arguments=dict(b.arguments))


async def check_spec(channel: AbstractChannel, spec: TopologySpec, hint: str) -> None:
    """Check that every exchange and queue of `spec` exists (passive declares)."""
    objects = [("exchange", ex.name) for ex in spec.exchanges]
    objects += [("queue", q.name) for q in spec.queues]
    for kind, name in objects:
        try:
            if kind == "exchange":
                await channel.declare_exchange(name, passive=True)
            else:
                await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            raise ConfigError(
                f"{kind} {name!r} is not on the broker, and this process only checks the "
                f"topology (MESH_TOPOLOGY=passive): the admin creates it with `{hint}`"
            ) from None


def spec_definitions(spec: TopologySpec, rabbit_version: str) -> dict[str, Any]:
    def _sorted(items: Iterable[dict[str, Any]], *keys: str) -> list[dict[str, Any]]:
        return sorted(items, key=lambda d: tuple(str(d[k]) for k in keys))

    return {
        "rabbit_version": rabbit_version,
        "vhosts": [{"name": "/"}],
        "exchanges": _sorted(
            (
                {
                    "name": ex.name,
                    "vhost": "/",
                    "type": ex.type.value,
                    "durable": True,
                    "auto_delete": False,
                    "internal": ex.internal,
                    "arguments": dict(ex.arguments),
                }
                for ex in spec.exchanges
            ),
            "name",
        ),
        "queues": _sorted(
            (
                {
                    "name": q.name,
                    "vhost": "/",
                    "durable": q.durable,
                    "auto_delete": q.auto_delete,
                    "arguments": dict(q.arguments),
                }
                for q in spec.queues
                if not q.exclusive
            ),
            "name",
        ),
        "bindings": _sorted(
            (
                {
                    "source": b.exchange,
                    "vhost": "/",
                    "destination": b.queue,
                    "destination_type": "queue",
                    "routing_key": b.routing_key,
                    "arguments": dict(b.arguments),
                }
                for b in spec.bindings
            ),
            "source",
            "destination",
            "routing_key",
        ),
    }


def message_priority(priority: int) -> int:
    """AMQP priority of an envelope priority (they are the same scale, clamped)."""
    return max(1, min(MAX_PRIORITY, priority))


__all__ = [
    "AGENT_HEADER",
    "CODE_HEADER",
    "CONCURRENCY_HEADER",
    "DEAD_REASONS",
    "DEFERRED_HEADER",
    "DELAY_HEADER",
    "DETAILS_HEADER",
    "HUMAN_COPY_TTL_MS",
    "INSTANCE_HEADER",
    "LAST_ERROR_HEADER",
    "REASON_HEADER",
    "SCORE_HEADER",
    "THRESHOLD_HEADER",
    "BindingSpec",
    "DeadReason",
    "ExchangeSpec",
    "QueueSpec",
    "Topology",
    "TopologySpec",
    "declare_spec",
    "message_priority",
    "priority_band",
]
