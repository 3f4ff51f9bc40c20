"""The router process: consumes `mesh.router`, validates, chooses an agent, dispatches.

Routers are stateless competing consumers: any number of them can share the queue.
Choosing an agent is delegated to a `Selector`; this module owns the envelope's path
(validation, ingress stamping, hop and deadline checks, dispatch and its failures).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import aio_pika
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue
from aiormq.exceptions import PublishError

from mesh.access.refusal import Refusal
from mesh.acks import AckBatcher
from mesh.connection import MeshConnection
from mesh.dispatch.events import emit_states
from mesh.dispatch.reaper import Reaper
from mesh.dispatch.store import TaskStore
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher, waiter, waiter_of
from mesh.metrics.core import Metrics, dispatch_headers
from mesh.results import error_result
from mesh.retrying import TRANSIENT_ERRORS, with_retries
from mesh.router.feedback_consumer import FeedbackConsumer
from mesh.router.guard import IngressGuard
from mesh.router.results import ResultForwarder
from mesh.topology import DeadReason
from schemas import (
    Event,
    InvalidEnvelope,
    Result,
    RouteInfo,
    TaskEnvelope,
    decode,
    new_id,
    now_ms,
)
from schemas.codec import peek
from schemas.result import ErrorInfo, Status

logger = logging.getLogger(__name__)

#: how often each router looks for orphaned tasks (past the maximum task lifetime)
REAPER_INTERVAL_S = 1.0
#: a message that met a broker or Redis outage is held this long before its requeue,
#: doubling with each outage in a row up to `OUTAGE_BACKOFF_MAX_S`
OUTAGE_BACKOFF_S = 0.05
OUTAGE_BACKOFF_MAX_S = 2.0


@dataclass(frozen=True, slots=True)
class RouteChoice:
    """The outcome of selection: an agent and how it was chosen, plus explanation data."""

    agent_id: str
    route: RouteInfo
    explain: dict[str, Any] = field(default_factory=dict)


class Ending(NamedTuple):
    """A task the router ends itself: status, dead-letter queue, error code and message."""

    status: Status
    reason: DeadReason
    code: str
    message: str
    details: dict[str, Any] | None = None


def no_agent(envelope: TaskEnvelope) -> Ending:
    """Nothing could be chosen for `envelope`."""
    return Ending(
        "unroutable",
        "unroutable",
        "no_agent",
        "no live agent matches the task",
        {"excluded_agents": envelope.excluded_agents},
    )


class Selector(Protocol):
    """Chooses an agent for an envelope without a `target` (the semantic router).

    `select` only chooses: it changes nothing. `dispatched` is called once the chosen
    dispatch was published and confirmed (breaker probes, load counts, learning).
    """

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | None: ...

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None: ...

    def is_live(self, agent_id: str) -> bool:
        """Does `agent_id` hold a live lease (an instance that takes its queue)?"""
        ...


class NoSelector:
    """Used until semantic routing is configured: only `target` envelopes are routable."""

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | None:
        return None

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None:
        return None

    def is_live(self, agent_id: str) -> bool:
        return False  # unknown without a snapshot: an expired dispatch is rerouted


def decision_event(
    envelope: TaskEnvelope,
    choice: RouteChoice | None,
    timings: dict[str, float] | None = None,
    explain: dict[str, Any] | None = None,
) -> Event:
    """The ``route.decision`` event of one decision (None: nothing could be chosen)."""
    return Event(
        type="route.decision",
        trace_id=envelope.trace_id,
        task_id=envelope.task_id,
        agent_id=choice.agent_id if choice else None,
        data={
            "capability": envelope.capability[:500],
            # where the task sits in its trace (`mesh trace` draws handoffs and budgets)
            "parent_task_id": envelope.parent_task_id,
            "hops": envelope.hops,
            "deadline_ms": envelope.deadline_ms,
            "route": choice.route.model_dump() if choice else None,
            "excluded": list(envelope.excluded_agents),
            "timings": timings or {},
            **(explain or {}),
        },
    )


def _before_dispatch(states: Any) -> list[str]:
    """States recorded with a dispatch, less ``dispatched`` (emitted after the confirm)."""
    return [s for s in states or () if s != "dispatched"]


def death_reason(headers: dict[str, Any]) -> str:
    """Why RabbitMQ dead-lettered a dispatch: expired, rejected, delivery_limit, maxlen."""
    reason = headers.get("x-first-death-reason")
    if isinstance(reason, bytes):
        reason = reason.decode()
    if isinstance(reason, str):
        return reason
    deaths = headers.get("x-death")
    if isinstance(deaths, list) and deaths and isinstance(deaths[0], dict):
        first = deaths[0].get("reason")
        return first.decode() if isinstance(first, bytes) else str(first)
    return "unknown"


class RouterService(Lifecycle):
    """One router: `await start()`, then it consumes until `await close()`."""

    def __init__(
        self,
        conn: MeshConnection,
        selector: Selector | None = None,
        *,
        metrics: Metrics | None = None,
    ) -> None:
        self.conn = conn
        #: None: nothing recorded (MESH_METRICS_PORT unset)
        self.metrics = metrics
        self.settings = conn.settings
        self.topology = conn.topology
        self.selector: Selector = selector or NoSelector()
        self.publisher = Publisher(conn)
        self.store = TaskStore(conn.redis, conn.keys, conn.settings)
        self.router_id = f"router-{new_id()[:8]}"
        self._queue: AbstractQueue | None = None
        self._consumer_tag: str | None = None
        self.handled = 0
        self.duplicates = 0
        #: transient failures in a row (the requeue backoff grows with them)
        self._outages = 0
        self.reaper = Reaper(self.store, self.publisher, conn.settings.lease_ttl_s)
        self._reaper_task: asyncio.Task[None] | None = None
        self._acks = AckBatcher()
        #: under access control: who may send what (ingress, returned dispatches)
        self.guard = IngressGuard(conn.settings, conn.topology)
        self.refused = 0
        #: under access control workers send result notices here; this router answers
        self.results = (
            ResultForwarder(conn, self.publisher, self.store)
            if conn.settings.access_control
            else None
        )
        #: under access control callers send feedback here; this router applies it
        self.feedback = (
            FeedbackConsumer(conn, self.publisher, self.store)
            if conn.settings.access_control
            else None
        )

    async def start(self) -> None:
        """Declare the topology and consume the router queue; a second call does nothing."""
        if self._queue is not None:
            return
        await self.publisher.start()
        await self.topology.declare(self.publisher.channel)
        channel = await self.conn.channel(confirms=False, prefetch=self.settings.prefetch)
        # passive declare (not ensure=False): a robust channel only restores the
        # consumers of queues it declared, so this is what survives a broker restart
        self._queue = await channel.get_queue(self.topology.router_queue, ensure=True)
        self._consumer_tag = await self._queue.consume(self._on_message)
        self._reaper_task = asyncio.create_task(self.reaper.run(REAPER_INTERVAL_S))
        if self.results is not None:
            await self.results.start()
        if self.feedback is not None:
            await self.feedback.start()
        if self.metrics is not None:
            self.metrics.watch("router", self)
        logger.info("router consuming %s", self.topology.router_queue)

    async def close(self) -> None:
        if self.metrics is not None:
            self.metrics.unwatch("router", self)
        if self.feedback is not None:
            await self.feedback.close()
        if self.results is not None:
            await self.results.close()
        reaper, self._reaper_task = self._reaper_task, None
        if reaper is not None:
            reaper.cancel()
            await asyncio.gather(reaper, return_exceptions=True)
        queue, self._queue = self._queue, None
        if queue is not None and self._consumer_tag is not None:
            try:
                await queue.cancel(self._consumer_tag)
            except (aio_pika.exceptions.AMQPError, RuntimeError):
                logger.debug("consumer cancel failed while closing", exc_info=True)
            await self._acks.drain()
            if not queue.channel.is_closed:
                await queue.channel.close()
        await self.publisher.close()

    # --- per message -----------------------------------------------------------------------
    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        received = time.perf_counter()
        self._acks.received(message)
        try:
            await self.handle(
                message.body,
                message.headers or {},
                message.routing_key or "",
                redelivered=bool(message.redelivered),
                received=received,
                reply_to=message.reply_to,
                correlation_id=message.correlation_id,
                user_id=message.user_id,
            )
        except asyncio.CancelledError:
            self._acks.settled(message)
            await _settle_quietly(message.nack(requeue=True))
            raise
        except TRANSIENT_ERRORS:
            # the broker or Redis went away: the message comes back (redelivered); the task
            # records make the second pass safe. It is held a moment first, longer while the
            # outage lasts, so an absent Redis does not spin the router on its own queue
            self._outages += 1
            delay = min(OUTAGE_BACKOFF_MAX_S, OUTAGE_BACKOFF_S * 2 ** min(self._outages, 8))
            logger.warning("transient failure; message requeued in %.2fs", delay, exc_info=True)
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            self._acks.settled(message)
            await _settle_quietly(message.nack(requeue=True))
            return
        except Exception:
            # a bug must not stop the router nor lose the task: it goes to a dead letter
            logger.critical("router failed on a message; dead-lettering it", exc_info=True)
            await self.publisher.dead_letter(
                "unroutable", message.body, details={"error": "router internal error"}
            )
            if self.metrics is not None:
                self.metrics.dead_lettered("unroutable")
        else:
            self.handled += 1
            self._outages = 0
        self._acks.ack(message)

    async def handle(
        self,
        body: bytes,
        headers: dict[str, Any],
        routing_key: str,
        *,
        redelivered: bool = False,
        received: float | None = None,
        reply_to: str | None = None,
        correlation_id: str | None = None,
        user_id: str | None = None,
    ) -> None:
        """Route one body from the router queue (from ingress, or back from an agent queue).

        `user_id` is the broker-validated sender: under access control it decides (see
        `IngressGuard`), never a body field.

        `reply_to` and `correlation_id` are the ingress message's AMQP properties (standard
        RPC): the Result goes to `reply_to` when the body names no queue, and carries the
        caller's `correlation_id`. Fields of the body win.

        The agent is chosen first (pure CPU), then the task is recorded with its whole path
        (``submitted -> routing -> dispatched``) in one Redis step, then it is published.
        """
        received = time.perf_counter() if received is None else received
        try:
            envelope = decode(TaskEnvelope, body, max_payload_bytes=self.settings.max_payload_bytes)
        except InvalidEnvelope as exc:
            await self._invalid(exc, reply_to, correlation_id)
            return
        routing = self._route(
            envelope,
            body,
            headers,
            routing_key,
            redelivered=redelivered,
            received=received,
            reply_to=reply_to,
            correlation_id=correlation_id,
            user_id=user_id,
        )
        tracing = self.publisher.tracing
        if tracing is None:
            await routing
        else:
            with tracing.route(envelope, headers, self.router_id):
                await routing

    async def _route(
        self,
        envelope: TaskEnvelope,
        body: bytes,
        headers: dict[str, Any],
        routing_key: str,
        *,
        redelivered: bool,
        received: float,
        reply_to: str | None,
        correlation_id: str | None,
        user_id: str | None,
    ) -> None:
        """`handle` once the body decoded (inside the ``mesh.route`` span when tracing)."""
        returned_from = self.topology.agent_of_routing_key(routing_key)
        #: a live agent whose queue held the dispatch past the accept timeout (a backlog)
        backlog: str | None = None
        returned = envelope
        reason = ""
        if returned_from is not None and "x-death" in headers:
            reason = death_reason(headers)
            if reason == "expired" and self.selector.is_live(returned_from):
                backlog = returned_from
            # a target is the only candidate: when nobody took it in time (a busy or
            # reconnecting worker) it is tried again; a rejection or a poison delivery
            # limit excludes it, like any other agent
            retry_target = envelope.target == returned_from and reason == "expired"
            excluded = envelope.excluded_agents
            envelope = envelope.model_copy(
                update={
                    "excluded_agents": excluded if retry_target else [*excluded, returned_from],
                    "reroutes": envelope.reroutes + 1,
                }
            )
            logger.info(
                "task_id=%s came back from agent=%s (%s; reroute %d)",
                envelope.task_id,
                returned_from,
                reason,
                envelope.reroutes,
            )
        else:
            returned_from = None
            envelope = self._stamp(envelope, reply_to, correlation_id)
        if self.guard.enabled:
            checked = self.guard.check(envelope, user_id, returned_from=returned_from)
            if isinstance(checked, Refusal):
                await self._refuse(envelope, body, checked)
                return
            envelope = checked
        ending = self._ending(envelope)
        patient = False
        if backlog is not None and backlog == envelope.target:
            choice = None  # the target's own queue is where it will be served
        else:
            choice = None if ending is not None else await self._choose(envelope)
        if backlog is not None and choice is None and self.time_left_ms(envelope) > 0:
            # the accept timeout is for agents that take no work; this one is live and
            # works through a backlog: back into its queue, waiting up to the deadline,
            # and it does not count as a reroute (another agent was tried first)
            envelope, ending, patient = returned, None, True
            choice = RouteChoice(backlog, returned.route or RouteInfo(strategy="target"))
        if ending is None and choice is None:
            ending = no_agent(envelope)
        if returned_from is not None and not patient and self.metrics is not None:
            self.metrics.rerouted(returned_from, reason)
        agent = choice.agent_id if choice is not None else ""
        dispatch = ("dispatched",) if choice is not None else ()
        if returned_from is not None:
            applied = await self.store.advance(
                envelope.task_id,
                "rerouting",
                "routing",
                *dispatch,
                by=self.router_id,
                note=returned_from,
                agent_id=agent,
            )
            if applied is None:
                applied = await self._refused_return(
                    envelope, dispatch, agent, redelivered=redelivered, ran=reason != "expired"
                )
            if applied is None:
                return
            await self._emit(envelope, _before_dispatch(applied), {"from_agent": returned_from})
        elif not await self._admit(envelope, body, redelivered, dispatch, agent, user_id):
            return
        if ending is not None:
            await self.end(envelope, body, *ending)
            return
        assert choice is not None
        dispatching = self.dispatch(envelope, choice, body, received, patient=patient)
        tracing = self.publisher.tracing
        if tracing is None:
            await dispatching
        else:
            exchange = self.topology.capabilities
            with tracing.dispatch(envelope, choice.agent_id, choice.route, exchange):
                await dispatching

    async def _refused_return(
        self,
        envelope: TaskEnvelope,
        dispatch: tuple[str, ...],
        agent: str,
        *,
        redelivered: bool,
        ran: bool,
    ) -> list[str] | None:
        """A returned dispatch whose move back to ``routing`` was refused: why, and what now.

        - No record at all: Redis lost it (restarted without persistence) while the broker
          held the task. It is recorded again, ``recovered`` when an agent may have run it
          (`ran`: anything but an expiry in the queue), so its side effects are refused.
        - ``routing`` or ``dispatched`` on a redelivered copy: an earlier pass of this very
          message moved the state, then failed before publishing; it goes on from there.
        - Anything else (finished, or held by a worker): a stale copy, nothing to do.

        Returns the states applied, or None when the message is done with.
        """
        task_id = envelope.task_id
        state = (await self.store.state(task_id)).get("state", "")
        if state == "":
            states = ("submitted", "routing", *dispatch)
            sub = await self.store.submit(
                envelope,
                redelivered=False,
                states=states,
                by=self.router_id,
                agent_id=agent,
                recovered=ran,
            )
            if sub.status != "new":
                return None
            logger.warning(
                "task_id=%s came back but its record was gone (Redis lost its data?): "
                "recorded again%s",
                task_id,
                "; its side effects are refused" if ran else "",
            )
            return list(states)
        if redelivered and state in ("routing", "dispatched"):
            if state == "routing":
                path: tuple[str, ...] = ("routing", *dispatch)
            else:
                path = ("dispatched",) if dispatch else ("dispatched", "rerouting", "routing")
            logger.info("task_id=%s redelivered in state %s: going on", task_id, state)
            return await self.store.advance(task_id, *path, by=self.router_id, agent_id=agent)
        # finished meanwhile (a duplicate copy completed), or a worker holds it
        return None

    async def _refuse(self, envelope: TaskEnvelope, body: bytes, refusal: Refusal) -> None:
        """An ingress message the guard does not believe: kept in ``dead.invalid``, and its
        sender answered only when its reply route is its own (`Refusal.answer`)."""
        self.refused += 1
        logger.warning("task_id=%s refused: %s", envelope.task_id, refusal.message)
        if refusal.answer:
            result = error_result(envelope, "failed", refusal.code, refusal.message)
            await self._reply(waiter_of(envelope), result)
        details = {"code": refusal.code, "message": refusal.message}
        await self.publisher.dead_letter("invalid", body, details=details)
        if self.metrics is not None:
            self.metrics.dead_lettered("invalid")

    async def _admit(
        self,
        envelope: TaskEnvelope,
        body: bytes,
        redelivered: bool,
        dispatch: tuple[str, ...],
        agent: str,
        user_id: str | None = None,
    ) -> bool:
        """Record a new task (with its dispatch when chosen); answer or join a duplicate.

        True when the task must go on (dispatched, or ended when nothing was chosen).
        """
        states = ("submitted", "routing", *dispatch)
        sub = await self.store.submit(
            envelope,
            redelivered=redelivered,
            states=states,
            by=self.router_id,
            agent_id=agent,
            owner=self.guard.owner(user_id),
        )
        if sub.status == "foreign":
            text = f"task_id {envelope.task_id} or trace_id {envelope.trace_id} is another user's"
            await self._refuse(envelope, body, Refusal("task_id_in_use", text, answer=True))
            return False
        if sub.status == "new":
            await self._emit(envelope, _before_dispatch(states))
            return True
        if sub.status == "resume":
            logger.info(
                "task_id=%s redelivered in state %s: routing it", envelope.task_id, sub.state
            )
            if not dispatch:
                return True
            path = ("dispatched",) if sub.state == "dispatched" else ("routing", "dispatched")
            moved = await self.store.advance(
                envelope.task_id, *path, by=self.router_id, agent_id=agent
            )
            return moved is not None
        self.duplicates += 1
        if sub.status == "answered":
            logger.info("redelivered task_id=%s was answered already", envelope.task_id)
        elif sub.status == "done" and sub.result is not None:
            logger.info("duplicate task_id=%s answered from its stored result", envelope.task_id)
            await self._reply(waiter_of(envelope), await self._sealed_or(sub.result))
        else:
            logger.info(
                "duplicate task_id=%s in state %s: its caller waits for the same Result",
                envelope.task_id,
                sub.state,
            )
        return False

    async def _sealed_or(self, stored: Result) -> Result:
        """Under access control, the Result an agent's worker sealed for the task (what a
        router forwards: the stored one is writable by any worker's Redis user), else
        `stored` (a task the mesh ended itself has no sealed copy)."""
        if not self.settings.access_control:
            return stored
        task_id = stored.task_id
        for agent_id in sorted(await self.store.dispatched_agents(task_id)):
            sealed = await self.store.sealed_result(agent_id, task_id)
            if sealed is not None:
                return sealed
        return stored

    async def _emit(
        self,
        envelope: TaskEnvelope,
        states: Any,
        data: dict[str, Any] | None = None,
        agent_id: str | None = None,
    ) -> None:
        await emit_states(
            self.publisher,
            states,
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            agent_id=agent_id,
            data=data,
        )

    async def _reply(self, waiter: str | None, result: Result) -> None:
        await with_retries(lambda: self.publisher.reply(waiter, result))

    def _stamp(
        self,
        envelope: TaskEnvelope,
        reply_to: str | None = None,
        correlation_id: str | None = None,
    ) -> TaskEnvelope:
        """Ingress bookkeeping: creation time and an absolute deadline when absent, and the
        AMQP reply route (properties) when the body has none."""
        now = now_ms()
        update: dict[str, Any] = {}
        if envelope.reply_to is None and reply_to:
            update["reply_to"] = reply_to[:255]
        if envelope.correlation_id is None and correlation_id not in (None, "", envelope.task_id):
            update["correlation_id"] = str(correlation_id)[:255]
        if envelope.created_ms is None:
            update["created_ms"] = now
        if envelope.deadline_ms is None:
            update["deadline_ms"] = now + envelope.timeout_ms
        return envelope.model_copy(update=update) if update else envelope

    def _ending(self, envelope: TaskEnvelope) -> Ending | None:
        """Why the task must end before any agent is chosen (hops, deadline, reroutes)."""
        if envelope.hops >= envelope.max_hops and envelope.hops > 0:
            return Ending(
                "dead",
                "hops",
                "max_hops_exceeded",
                f"hops={envelope.hops} reached max_hops={envelope.max_hops}",
                {"trajectory": envelope.trajectory},
            )
        if self.time_left_ms(envelope) <= 0:
            return Ending(
                "expired",
                "expired",
                "deadline_passed",
                "the task's deadline passed before it could be dispatched",
            )
        if envelope.reroutes > self.settings.max_reroutes:
            return Ending(
                "unroutable",
                "unroutable",
                "reroutes_exhausted",
                f"no agent accepted the task after {envelope.reroutes - 1} reroutes",
                {"excluded_agents": envelope.excluded_agents},
            )
        return None

    async def _choose(self, envelope: TaskEnvelope) -> RouteChoice | None:
        if envelope.target is not None:
            if envelope.target in envelope.excluded_agents:
                return None
            return RouteChoice(envelope.target, RouteInfo(strategy="target"))
        return await self.selector.select(envelope)

    async def dispatch(
        self,
        envelope: TaskEnvelope,
        choice: RouteChoice,
        raw: bytes,
        received: float,
        *,
        patient: bool = False,
    ) -> None:
        """Publish a recorded dispatch (state ``dispatched`` already); on an unbound agent
        key, exclude that agent and choose again."""
        metrics = self.metrics
        while True:
            left = self.time_left_ms(envelope)
            expiration = left if patient else min(self.settings.accept_timeout_ms, left)
            key = self.topology.agent_routing_key(choice.agent_id, envelope.priority)
            sent = envelope.model_copy(update={"route": choice.route})
            if self.settings.access_control:  # whose sealed Result may come back
                await self.store.record_dispatch(envelope.task_id, choice.agent_id)
            try:
                await self.publisher.publish_envelope(
                    self.topology.capabilities,
                    key,
                    sent,
                    expiration_ms=expiration,
                    headers=None if metrics is None else dispatch_headers(),
                )
                break
            except PublishError:
                logger.info(
                    "task_id=%s: no queue bound for agent=%s", envelope.task_id, choice.agent_id
                )
                if metrics is not None:
                    metrics.rerouted(choice.agent_id, "unbound")
            envelope = envelope.model_copy(
                update={
                    "excluded_agents": [*envelope.excluded_agents, choice.agent_id],
                    "reroutes": envelope.reroutes + 1,
                }
            )
            rerouting = await self.store.advance(
                envelope.task_id, "rerouting", "routing", by=self.router_id, note="unbound"
            )
            if rerouting is None:
                return
            await self._emit(envelope, rerouting, {"from_agent": choice.agent_id})
            ending = self._ending(envelope)
            found = None if ending is not None else await self._choose(envelope)
            if found is None:
                await self.end(envelope, raw, *(ending or no_agent(envelope)))
                return
            choice = found
            if self.publisher.tracing is not None:
                self.publisher.tracing.chose(choice.agent_id, choice.route)
            moved = await self.store.advance(
                envelope.task_id, "dispatched", by=self.router_id, agent_id=choice.agent_id
            )
            if moved is None:
                return
        elapsed = time.perf_counter() - received
        route_ms = round(elapsed * 1000, 3)
        if metrics is not None:
            metrics.dispatched(choice.agent_id, choice.route.strategy, elapsed)
        # only now, with the publish confirmed, does the dispatch count (breaker probe,
        # load, learning): a dispatch that did not happen leaves no trace in them
        self.selector.dispatched(sent, choice)
        await self._emit(
            sent, ("dispatched",), {"route": choice.route.model_dump()}, agent_id=choice.agent_id
        )
        await self._emit_decision(sent, choice, route_ms)
        logger.debug(
            "dispatched task_id=%s agent=%s strategy=%s score=%s route_ms=%.2f",
            envelope.task_id,
            choice.agent_id,
            choice.route.strategy,
            choice.route.score,
            route_ms,
        )

    async def _emit_decision(
        self, envelope: TaskEnvelope, choice: RouteChoice, route_ms: float
    ) -> None:
        """The decision log: one ``route.decision`` per dispatch, after its confirm."""
        await self.publisher.emit(
            decision_event(envelope, choice, {"route_ms": route_ms}, choice.explain)
        )

    async def end(
        self,
        envelope: TaskEnvelope,
        raw: bytes,
        status: Status,
        reason: DeadReason,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
    ) -> None:
        """Terminal path: record the Result, answer every caller, dead-letter with the reason.

        The Result is stored with the task, so a later duplicate of the task_id gets the
        same answer; every reply_to recorded for the task_id is answered.
        """
        claims = int((await self.store.holder_of(envelope.task_id)).get("claims", 0) or 0)
        if claims:
            # the caller must not read "never ran": an instance that then died had started it
            message += (
                f"; it had started on an instance ({claims} claim(s)), so side effects of "
                "its handler may have happened"
            )
            details = {**(details or {}), "started": True}
        result = error_result(envelope, status, code, message, details)
        commit = await self.store.finish(result, status, by=self.router_id, note=code)
        if commit.status == "done":
            logger.info("task_id=%s already finished; %s dropped", envelope.task_id, code)
            return
        if self.publisher.tracing is not None:
            self.publisher.tracing.annotate(status=status, code=code)
        waiters = set(commit.waiters)
        own = waiter_of(envelope)
        if own:
            waiters.add(own)
        for each in sorted(waiters):
            await self._reply(each, result)
        await self.store.mark_replied(envelope.task_id)
        await self.publisher.dead_letter(
            reason,
            raw,
            details={"code": code, "message": message, **(details or {})},
            task_id=envelope.task_id,
        )
        if self.metrics is not None:
            self.metrics.ended(status)
            self.metrics.dead_lettered(reason)
        await self._emit(envelope, (status,), {"code": code, "message": message})

    async def _invalid(
        self, exc: InvalidEnvelope, reply_to: str | None = None, correlation_id: str | None = None
    ) -> None:
        """Answer an invalid body where it says (or the AMQP reply_to), dead-letter it."""
        reply_to = peek(exc.raw, "reply_to") or reply_to
        task_id = peek(exc.raw, "task_id") or "unknown"
        if reply_to is not None:
            result = Result(
                task_id=task_id[:128],
                trace_id=(peek(exc.raw, "trace_id") or "")[:128] or None,
                status="failed",
                error=ErrorInfo(
                    code="invalid_envelope", message=str(exc)[:8_000], details=exc.as_details()
                ),
            )
            await self._reply(waiter(reply_to, correlation_id), result)
        await self.publisher.dead_letter("invalid", exc.raw, details=exc.as_details())
        if self.metrics is not None:
            self.metrics.dead_lettered("invalid")

    @staticmethod
    def time_left_ms(envelope: TaskEnvelope) -> int:
        if envelope.deadline_ms is None:
            return envelope.timeout_ms
        return envelope.deadline_ms - now_ms()


#: how long a nack on the way out may wait: on a channel that is gone (a robust one waits
#: for its reconnect) it must not hold a cancelled handler, and so a shutdown, forever
SETTLE_TIMEOUT_S = 5.0
_SETTLE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT_ERRORS, TimeoutError)


async def _settle_quietly(action: Any) -> None:
    """Ack or nack; on a channel lost meanwhile the broker redelivers, which is what we want."""
    try:
        await asyncio.wait_for(action, SETTLE_TIMEOUT_S)
    except _SETTLE_ERRORS:
        logger.info("ack/nack on a lost channel skipped; the message will be redelivered")
