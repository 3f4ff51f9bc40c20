"""The router process: consumes the router queues and runs each delivery through its steps.

Routers are stateless competing consumers: any number of them can share the queues, one
per priority band (`Topology.router_queues`), drained by weight by the same
`mesh.wire.BandedSubscriber` a worker drains its agent's bands with. The
shape is the worker's: `RouterService` subscribes and runs the steps in order over one
frozen `RouterDeps` (built once at start, with the guard, the reply path and the hooks
chosen there), on subscribers whose settle policy, `RouterSettler`, is the
only code that acks or nacks. The steps, one file
each:

1. `mesh.router.intake`: decode (an invalid body is answered and dead-lettered), stamp;
2. `mesh.router.returns`: a dispatch back from an agent queue, rerouted;
3. the guard (`mesh.router.guard`): is the sender believed?
   A new task carrying several intents goes to `mesh.router.compound` instead (children
   on its trace, one merged Result: `mesh.router.compound_replies`);
4. `mesh.router.choice`: an agent, or why the task ends here;
5. intake's `admit` (new task) or `Returns.record` (returned one): recorded in Redis;
6. `mesh.router.dispatch` publishes, or `mesh.router.endings` ends the task.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import replace

from aio_pika.abc import AbstractIncomingMessage

from mesh.access.refusal import Refusal
from mesh.connection import MeshConnection
from mesh.dispatch.reaper import Reaper
from mesh.dispatch.store import TaskStore
from mesh.hooks import hooks_for
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.metrics.core import Metrics
from mesh.router.choice import Chooser
from mesh.router.compound import Compound
from mesh.router.compound_replies import CompoundReplies
from mesh.router.delivery import Delivery
from mesh.router.deps import RouterDeps
from mesh.router.dispatch import Dispatcher
from mesh.router.endings import Endings
from mesh.router.feedback_consumer import FeedbackConsumer
from mesh.router.guard import guard_for
from mesh.router.intake import Admitted, Intake
from mesh.router.legacy import report_legacy_router_queue
from mesh.router.plan import NoSelector, RouteChoice, Selector
from mesh.router.reply_path import reply_path_for
from mesh.router.results import ResultForwarder
from mesh.router.returns import Returned, Returns
from mesh.router.settle import RouterSettler
from mesh.schemas import InvalidEnvelope, TaskEnvelope, new_id
from mesh.topology import redacts_decisions
from mesh.wire import OUTAGE_HOLD_S, BandedSubscriber, OutageBackoff, held_through_outages

logger = logging.getLogger(__name__)

#: how often each router looks for orphaned tasks (past the maximum task lifetime)
REAPER_INTERVAL_S = 1.0


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
        self.reaper = Reaper(self.store, self.publisher, conn.settings.lease_ttl_s)
        access = conn.settings.access_control
        #: under access control workers send result notices here; this router answers
        self.results = (
            ResultForwarder(conn, self.publisher, self.store, self.router_id) if access else None
        )
        #: under access control callers send feedback here; this router applies it
        self.feedback = FeedbackConsumer(conn, self.publisher, self.store) if access else None
        #: the Results of compound requests' children (any router's), merged
        self.compound_replies = CompoundReplies(conn, self.publisher, self.store, self.router_id)
        self.deps: RouterDeps | None = None
        self._intake_sub: BandedSubscriber | None = None
        self._reaper_task: asyncio.Task[None] | None = None
        #: the pause between tries of a delivery an outage holds (`_on_message`), and how
        #: long it may be held before it is requeued
        self._hold = OutageBackoff()
        self.outage_hold_s = OUTAGE_HOLD_S

    # --- counters (read by `mesh.metrics` at scrape time) ----------------------------------
    @property
    def handled(self) -> int:
        intake = self._intake_sub
        if intake is None:
            return 0
        return sum(p.handled for p in intake.policies if isinstance(p, RouterSettler))

    @property
    def duplicates(self) -> int:
        return self._intake.duplicates if self.deps is not None else 0

    @property
    def refused(self) -> int:
        return self._endings.refused if self.deps is not None else 0

    # --- lifecycle -------------------------------------------------------------------------
    def _compose(self) -> RouterDeps:
        """The composition root: what this router is, chosen once."""
        deps = RouterDeps(
            router_id=self.router_id,
            settings=self.settings,
            topology=self.topology,
            publisher=self.publisher,
            store=self.store,
            selector=self.selector,
            guard=guard_for(self.settings, self.topology),
            replies=reply_path_for(self.settings, self.store),
            hooks=hooks_for(self.metrics, self.publisher.tracing),
            outcome_tag=self.selector.outcome_tag,
            redact_decisions=redacts_decisions(
                self.settings.access_control, self.settings.observer_reads_requests
            ),
        )
        self._endings = Endings(deps)
        self._intake = Intake(deps, self._endings)
        self._returns = Returns(deps)
        self._chooser = Chooser(deps)
        self._dispatcher = Dispatcher(deps, self._chooser, self._endings)
        self._compound = Compound(
            deps, self._intake, self._chooser, self._dispatcher, self._endings
        )
        return deps

    async def start(self) -> None:
        """Declare the topology and consume the router queues; a second call does nothing."""
        if self._intake_sub is not None:
            return
        await self.publisher.start()
        await self.topology.declare(self.publisher.channel)
        await report_legacy_router_queue(self.conn)
        self.deps = deps = self._compose()
        # before the router queue: children's Results must find their queue
        await self.compound_replies.start()
        endings = self._endings
        # `prefetch` deliveries routed at once, shared by the bands by weight while they wait
        subscriber = BandedSubscriber(
            self.conn,
            self.topology.router_queues(),
            self._on_delivery,
            lambda: RouterSettler(endings),
            slots=self.settings.prefetch,
        )
        self._intake_sub = subscriber  # before its first delivery (`_on_delivery` reads it)
        try:
            await subscriber.start()
        except BaseException:
            self._intake_sub = None
            raise
        self._reaper_task = asyncio.create_task(self.reaper.run(REAPER_INTERVAL_S))
        if self.results is not None:
            self.results.hooks = deps.hooks
            await self.results.start()
        if self.feedback is not None:
            await self.feedback.start()
        deps.hooks.attach("router", self)
        logger.info(
            "router consuming %s", ", ".join(name for name, _ in self.topology.router_queues())
        )

    async def close(self) -> None:
        if self.deps is not None:
            self.deps.hooks.detach("router", self)
        if self.feedback is not None:
            await self.feedback.close()
        if self.results is not None:
            await self.results.close()
        reaper, self._reaper_task = self._reaper_task, None
        if reaper is not None:
            reaper.cancel()
            await asyncio.gather(reaper, return_exceptions=True)
        subscriber, self._intake_sub = self._intake_sub, None
        if subscriber is not None:
            await subscriber.close()
        await self.compound_replies.close()
        await self.publisher.close()

    # --- per message -----------------------------------------------------------------------
    async def _on_delivery(self, message: AbstractIncomingMessage, band: int) -> None:
        """One delivery of a band's queue, routed holding one of the router's slots."""
        assert self._intake_sub is not None
        async with self._intake_sub.slot(band):
            await self._on_message(message)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        """One delivery of the router queue; `RouterSettler` settles it (outage, bug).

        An outage holds it, routed again in place as a redelivery (`held_through_outages`),
        rather than requeueing it at once: a quorum router queue's delivery limit must not
        be spent by an agent queue's leader election or a Redis restart. Its last delivery
        under that limit is ended instead of routed (`Endings.spent`): nothing is dropped."""
        delivery = Delivery(
            message.body,
            message.headers or {},
            message.routing_key or "",
            redelivered=bool(message.redelivered),
            received=time.perf_counter(),
            reply_to=message.reply_to,
            correlation_id=message.correlation_id,
            user_id=message.user_id,
            priority=message.priority or 0,
        )
        if self.topology.last_delivery(delivery.redelivered, delivery.headers):
            # the broker would drop it next time: ended as it would be routed (a return's
            # sender is the router that dispatched it, an ingress one its caller)
            checked: TaskEnvelope | Refusal | None = None
            with contextlib.suppress(InvalidEnvelope):
                checked = self._checked(self._intake.decode_body(delivery), delivery)[2]
            await self._endings.spent(delivery, checked)
            return

        async def attempt(again: bool) -> None:
            if again:  # charged to its sender once
                await self.route(replace(delivery, redelivered=True), charge=False)
            else:
                await self.route(delivery)

        await held_through_outages(
            attempt, message, self._hold, what="tasks", hold_s=self.outage_hold_s
        )

    async def route(self, delivery: Delivery, *, charge: bool = True) -> None:
        """Route one body from the router queue (from ingress, or back from an agent queue).

        The agent is chosen first (pure CPU), then the task is recorded with its whole path
        (``submitted -> routing -> dispatched``) in one Redis step, then it is published.
        `charge`: count it against its sender's ingress budget (not when routed again).
        """
        if self.deps is None:
            raise RuntimeError("RouterService.start() was not awaited")
        if charge and not await self._intake.within_budget(delivery):
            return
        envelope = await self._intake.decode(delivery)
        if envelope is None:
            return
        with self.deps.hooks.route(envelope, delivery.headers, self.router_id):
            await self._route(envelope, delivery)

    def _checked(
        self, envelope: TaskEnvelope, delivery: Delivery
    ) -> tuple[Returned | None, TaskEnvelope, TaskEnvelope | Refusal]:
        """The return `envelope` is (None: from ingress), the envelope judged (a return's
        copy with its agent excluded, or the ingress one stamped), and what the guard makes
        of it: the envelope to route, or why it is refused."""
        deps = self.deps
        assert deps is not None
        returned = self._returns.of(envelope, delivery.headers, delivery.routing_key)
        if returned is not None:
            envelope = returned.envelope
        else:
            envelope = self._intake.stamp(envelope, delivery)
        checked = deps.guard.check(
            envelope,
            delivery.user_id,
            returned_from=returned.agent_id if returned is not None else None,
            amqp_priority=delivery.priority if returned is None else 0,
        )
        return returned, envelope, checked

    async def _route(self, envelope: TaskEnvelope, delivery: Delivery) -> None:
        returned, envelope, checked = self._checked(envelope, delivery)
        if isinstance(checked, Refusal):
            await self._endings.refuse(envelope, delivery.body, checked)
            return
        split = await self._compound.split(checked) if returned is None else None
        if split is not None:
            await self._compound.run(checked, split, delivery)
            return
        plan = await self._chooser.plan(checked, returned)
        admitted: Admitted
        if returned is not None:
            recorded = await self._returns.record(plan, returned, redelivered=delivery.redelivered)
            admitted = "go" if recorded else ""
        else:
            admitted = await self._intake.admit(plan, delivery)
        if not admitted:
            return
        if plan.ending is not None:
            await self._endings.end(plan.envelope, delivery.body, plan.ending)
            return
        assert plan.choice is not None
        await self._dispatcher.dispatch(
            plan.envelope,
            plan.choice,
            delivery.body,
            delivery.received,
            patient=plan.patient,
            seeded=admitted == "seeded",
        )


__all__ = ["RouteChoice", "RouterService", "Selector"]
