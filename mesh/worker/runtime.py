"""`WorkerRuntime`: runs an `Agent` as a queue worker on its agent queue.

Per delivery: decode -> claim the task_id under this instance's fencing token (a duplicate
or a finished task is not run again) -> the middleware chain (`mesh.worker.middleware`:
loop alert, deadline, the worker's own hooks) around the handler, cancelled at
min(deadline, max task lifetime) -> `Settler.settle` (fenced commit, replies, ack). Only
the `Settler` acks, nacks or republishes a delivery.

Shutdown order (habit 10): stop consuming (heartbeats keep flowing) -> await in-flight
tasks up to the grace (or a `hurry`) -> hand the rest back to the agent's own queue
(handlers cancelled, claims released; `Settler.stopping`) -> deregister -> close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from aio_pika.abc import AbstractIncomingMessage

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.dispatch.context import ContextStore
from mesh.dispatch.events import emit_states
from mesh.dispatch.store import Claim, Holder, ReplyMarks, TaskStore
from mesh.errors import NotStarted
from mesh.hooks import NO_HOOKS, Hooks, hooks_for
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.retrying import TRANSIENT_ERRORS
from mesh.schemas import InvalidEnvelope, TaskEnvelope, decode, new_id, now_ms
from mesh.topology import DEFERRED_HEADER
from mesh.wire import BandedSubscriber, Manual
from mesh.worker.agent import Agent
from mesh.worker.answers import answers_for
from mesh.worker.context import TaskContext
from mesh.worker.control import ControlConsumer
from mesh.worker.deps import HandoffClient, TaskDeps, WorkerDeps
from mesh.worker.membership import Membership, StaticMembership
from mesh.worker.middleware import (
    CallNext,
    ContractMiddleware,
    DeadlineMiddleware,
    LoopAlertMiddleware,
    MetricsMiddleware,
    TaskRun,
    WorkerMiddleware,
    chain,
    handler_step,
)
from mesh.worker.outcome import Outcome
from mesh.worker.settle import Settler
from mesh.worker.watchdog import CANCEL_GRACE_S, Stop, watched

if TYPE_CHECKING:
    from mesh.metrics.core import Metrics

logger = logging.getLogger(__name__)

#: a task whose handler froze here is handed on this many times before this instance
#: runs it again (no other instance took it)
FROZEN_PASSES = 3
#: how long a drain whose grace is over waits for its handed-back tasks to settle (a
#: cancelled handler gets `CANCEL_GRACE_S`, then the release and the republish)
HAND_BACK_S = CANCEL_GRACE_S + 10.0
#: a task whose handler ended this long ago and whose delivery is still not settled is
#: reported stuck (heartbeats carry the count; `mesh agents` shows it)
STUCK_AFTER_S = 30.0


def current_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - always called from a task
        raise RuntimeError("not in a task")
    return task


class WorkerRuntime(Lifecycle):
    """One worker instance of an agent: ``async with WorkerRuntime(agent, conn):``, or
    ``await start()`` then ``await drain(grace_s)`` (``close()`` drains with `grace_s`).

    `middleware` runs around every task, inside the built-in loop alert and deadline steps.
    """

    def __init__(
        self,
        agent: Agent,
        conn: MeshConnection,
        *,
        instance_id: str | None = None,
        membership: Membership | None = None,
        middleware: Sequence[WorkerMiddleware] = (),
        grace_s: float = 30.0,
        metrics: Metrics | None = None,
    ) -> None:
        self.agent = agent
        #: None: nothing recorded (MESH_METRICS_PORT unset)
        self.metrics = metrics
        self.conn = conn
        self.settings = conn.settings
        self.topology = conn.topology
        self.instance_id = instance_id or f"{agent.agent_id}-{new_id()[:12]}"
        self.membership: Membership = membership or StaticMembership(agent.agent_id)
        self.grace_s = grace_s
        self.publisher = Publisher(conn)
        # under access control the task records this worker may touch are its agent's view
        # (`TaskStore`): a router seeds each there, and finishes the mesh's own from it
        records = conn.keys.for_agent(agent.agent_id) if conn.settings.access_control else conn.keys
        self.store = TaskStore(conn.redis, records, conn.settings, instances=conn.keys)
        self.replied = ReplyMarks(self.store)
        self.contexts = ContextStore.of_worker(conn.redis, conn.keys, conn.settings, agent.agent_id)
        self.task_deps = TaskDeps(
            agent_id=agent.agent_id,
            instance_id=self.instance_id,
            settings=self.settings,
            keys=conn.keys,
            effects=self.store,
            contexts=self.contexts,
            fence=self.membership,
            client=self.client,
            hooks=lambda: self.hooks,
        )
        #: spans and metrics, chosen once the publisher started (`mesh.hooks`)
        self.hooks: Hooks = NO_HOOKS
        self.settler = Settler(
            WorkerDeps(self.task_deps, self.topology, self.store, self.publisher, self.replied),
            answers_for(self.settings, self.publisher, self.topology, self.replied),
        )
        timing = [] if metrics is None else [MetricsMiddleware(metrics, agent.agent_id)]
        self.middleware: list[WorkerMiddleware] = [
            LoopAlertMiddleware(self.publisher.emit),
            *timing,
            DeadlineMiddleware(),
            *ContractMiddleware.of(agent),
            *middleware,
        ]
        #: the agent's band queues, drained by weight; the `Settler` settles what they
        #: deliver (a manual policy)
        self._bands: BandedSubscriber | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: task_id -> the local run, so a redelivery of a running task waits for it
        self._running: dict[str, asyncio.Task[Any]] = {}
        self._client: MeshClient | None = None
        self.control = ControlConsumer(
            conn, agent, self.instance_id, self.publisher, lambda: self.in_flight
        )
        self._client_lock = asyncio.Lock()
        self._idle = asyncio.Event()
        self._idle.set()
        #: task -> monotonic time its handler ended (it is settling since)
        self._settling: dict[asyncio.Task[Any], float] = {}
        self._stuck_reported = 0
        #: a handler without progress this long is frozen (`mesh.worker.watchdog`)
        self.processing_timeout_s = agent.processing_timeout_s or conn.settings.processing_timeout_s
        #: tasks whose handler froze here -> times handed on since (another instance first)
        self._frozen: dict[str, int] = {}
        self._state: str = "new"  # new -> started -> closed
        self._chain: CallNext | None = None
        self.executed = 0
        #: deliveries received (runs, redeliveries, hand-backs: a storm shows here)
        self.deliveries = 0
        #: set when the grace of a drain is over: what is in flight goes back to the queue
        self._handing_back = Stop()
        #: set by `hurry` (a second Ctrl-C): the drain's grace ends at once
        self._hurried = asyncio.Event()
        #: tasks this instance handed back to its agent's queue while stopping
        self.handed_back = 0

    @property
    def completed(self) -> int:
        """Tasks this instance answered ``completed``."""
        return self.settler.completed

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def stuck(self) -> int:
        """Tasks in flight whose handler ended over `STUCK_AFTER_S` ago, still unsettled.

        Logged (once per change of the count) as well as reported in heartbeats.
        """
        limit = time.monotonic() - STUCK_AFTER_S
        count = sum(1 for since in self._settling.values() if since < limit)
        if count != self._stuck_reported:
            self._stuck_reported = count
            if count:
                logger.error(
                    "worker %s: %d task(s) in flight for over %.0fs after their handler "
                    "ended; the instance has %d of %d slots left",
                    self.instance_id,
                    count,
                    STUCK_AFTER_S,
                    self.agent.max_concurrency - self.in_flight,
                    self.agent.max_concurrency,
                )
        return count

    def holder(self) -> Holder:
        """This instance as a claim holder, with its current fencing token."""
        fenced = not isinstance(self.membership, StaticMembership)
        return Holder(self.instance_id, self.membership.token, fenced)

    async def start(self) -> None:
        """Declare the agent's queue, register, and start consuming; a second call does
        nothing.

        Raises:
            NotStarted: the runtime was closed before (build a new one).
        """
        if self._state == "started":
            return
        if self._state == "closed":
            raise NotStarted(f"worker {self.instance_id} was closed; build a new WorkerRuntime")
        self._state = "started"
        self.agent.require_handler()
        await self.publisher.start()
        self.hooks = self.settler.hooks = hooks_for(self.metrics, self.publisher.tracing)
        await self.topology.declare(self.publisher.channel)
        await self.topology.declare(
            self.publisher.channel, self.topology.agent_spec(self.agent.agent_id)
        )
        await self.membership.start(lambda: self.in_flight, self.stuck)
        # the band queues: one channel each (one band alone keeps every slot busy); the gate
        # shares the slots, and while several bands wait, they drain by
        # `Settings.priority_weights`
        self._bands = BandedSubscriber(
            self.conn,
            self.topology.agent_queues(self.agent.agent_id),
            self._on_message,
            lambda: Manual("tasks"),
            slots=self.agent.max_concurrency,
        )
        await self._bands.start()
        await self.control.start()
        self.hooks.attach("worker", self)
        logger.info("worker %s consuming agent=%s", self.instance_id, self.agent.agent_id)

    async def client(self) -> HandoffClient:
        """The reply queue this worker waits on for handoff Results (opened on first use)."""
        async with self._client_lock:
            if self._client is None:
                client = MeshClient(self.conn, client_id=self.instance_id)
                await client.start()
                self._client = client
            return self._client

    async def _on_message(self, message: AbstractIncomingMessage, band: int = 0) -> None:
        self.deliveries += 1
        task = asyncio.create_task(self._gated(message, band))
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._settling.pop(task, None)
        if not self._tasks:
            self._idle.set()
        if not task.cancelled() and task.exception() is not None:
            logger.critical("worker task crashed", exc_info=task.exception())

    async def _gated(self, message: AbstractIncomingMessage, band: int) -> None:
        assert self._bands is not None
        async with self._bands.slot(band):
            await self._run(message)

    async def _run(self, message: AbstractIncomingMessage) -> None:
        settler = self.settler
        try:
            envelope = decode(
                TaskEnvelope, message.body, max_payload_bytes=self.settings.max_payload_bytes
            )
        except InvalidEnvelope as exc:
            await settler.invalid(message, exc)
            return
        running = self._running.get(envelope.task_id)
        if running is not None:
            # redelivered while still running here (a reconnect): settle it with the run
            await asyncio.wait({running})
            await settler.duplicate(message)
            return
        self._running[envelope.task_id] = current_task()
        ids = (self.agent.agent_id, self.instance_id)
        try:
            with self.hooks.handle(envelope, message.headers or {}, *ids):
                await self._attempt(message, envelope)
        finally:
            self._running.pop(envelope.task_id, None)

    async def _attempt(self, message: AbstractIncomingMessage, envelope: TaskEnvelope) -> None:
        """Claim, run and settle a delivery; an outage or a bug on the way settles it too."""
        try:
            await self._claimed_run(message, envelope)
        except TRANSIENT_ERRORS:
            await self.settler.outage(message, envelope)
        except Exception:
            await self.settler.broken(message, envelope)

    async def _claimed_run(self, message: AbstractIncomingMessage, envelope: TaskEnvelope) -> None:
        received = time.monotonic()
        holder = self.holder()
        lifetime_ms = int(self.settings.max_task_lifetime_s * 1000)

        async def claim_it(holder: Holder) -> Claim:
            return await self.store.claim(
                envelope,
                holder,
                agent_id=self.agent.agent_id,
                redelivered=bool(message.redelivered),
                lifetime_end_ms=now_ms() + lifetime_ms,
                count_visit=envelope.attempt == 0,
                pristine=_pristine(message, envelope),
            )

        if self._handing_back.is_set():
            # the worker stops: a delivery not started yet goes back unrun
            await self.settler.hand_back(message, envelope, 0, marker=self.instance_id)
            self.handed_back += 1
            return
        if envelope.task_id in self._frozen and self._frozen[envelope.task_id] < FROZEN_PASSES:
            # it froze here: another instance should take it (after a few passes, this one)
            self._frozen[envelope.task_id] += 1
            await self.settler.hand_back(message, envelope, 0, marker=self.instance_id)
            return
        self._frozen.pop(envelope.task_id, None)
        claim = await claim_it(holder)
        if claim.status == "stale" and await self.membership.renew(
            holder.token, self.settings.lease_ttl_s
        ):
            # the lease had lapsed (a registry or broker outage): one re-registration for
            # the whole instance, then this task claims again with the new token
            holder = self.holder()
            claim = await claim_it(holder)
        if claim.status != "claimed":
            await self.settler.claimed(message, envelope, claim)
            self.hooks.annotate(claim.status)
            return
        self.hooks.started(self.agent.agent_id, message.headers)
        if claim.recovered:
            logger.warning(
                "task_id=%s: its record was lost and recovered (Redis lost its data?); it "
                "runs again, and side effects guarded by apply_once are refused",
                envelope.task_id,
            )
        await emit_states(
            self.publisher,
            ("accepted", "processing"),
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            agent_id=self.agent.agent_id,
            instance_id=self.instance_id,
            data={"takeover": claim.takeover, "attempt": envelope.attempt},
            router=envelope.route.router if envelope.route is not None else None,
        )
        run = TaskRun(
            envelope,
            TaskContext(self.task_deps, envelope, holder),
            lifetime_ms,
            takeover=claim.takeover,
            visits=claim.visits,
        )
        outcome = await watched(
            run, self._execute, self.processing_timeout_s, stop=self._handing_back
        )
        if outcome is None and self._handing_back.is_set():
            # the worker stops and its grace is over: back to this agent's own queue
            await self.settler.stopping(message, envelope, holder)
            self.handed_back += 1
            self.hooks.annotate("handed_back", "worker_stopping")
            return
        if outcome is None:  # frozen: the task goes to another instance
            self._frozen[envelope.task_id] = 0
            await self.settler.frozen(message, envelope, holder)
            self.hooks.annotate("handed_back", "processing_timeout")
            return
        timings: dict[str, float] = {}
        if run.executed:
            self._settling[current_task()] = time.monotonic()
            timings = {"handler_ms": round((time.monotonic() - received) * 1000, 3)}
        result = await asyncio.shield(
            self.settler.settle(message, envelope, outcome, timings, holder)
        )
        status = result.status if result is not None else _UNSETTLED[outcome.kind]
        code = result.error.code if result is not None and result.error else None
        self.hooks.annotate(status, code)

    async def _execute(self, run: TaskRun) -> Outcome:
        """The middleware chain around the agent's handler (built once, on first use)."""
        if self._chain is None:
            handler = handler_step(
                self.agent.require_handler(), expose_errors=self.agent.expose_errors
            )

            async def counted(r: TaskRun) -> Outcome:
                self.executed += 1
                return await handler(r)

            self._chain = chain(self.middleware, counted)
        return await self._chain(run)

    async def run_until_idle(self, timeout: float = 10.0) -> None:
        """Wait until no task is in flight (for tests and drains)."""
        async with asyncio.timeout(timeout):
            await self._idle.wait()

    def hurry(self) -> None:
        """End a drain's grace now (a second Ctrl-C): what is in flight is handed back."""
        if not self._hurried.is_set() and self._state == "closed" and self._tasks:
            logger.warning(
                "worker %s: stopping at once; handing %d task(s) back",
                self.instance_id,
                len(self._tasks),
            )
        self._hurried.set()

    async def drain(self, grace_s: float | None = None) -> None:
        """Stop taking tasks, finish in-flight ones, hand back the rest, deregister, close.

        Waits `grace_s` (default: the runtime's `grace_s`) for in-flight tasks, or until
        `hurry`; then their handlers are cancelled and their tasks handed back to this
        agent's own queue (released claims: a late commit is refused), where another
        instance, or this one restarted, takes them. Safe to call twice (the second call
        does nothing).
        """
        if self._state == "closed":
            return
        self._state = "closed"
        grace_s = self.grace_s if grace_s is None else grace_s
        await self.control.close()  # a draining instance no longer bids
        if self._bands is not None:
            await self._bands.stop()
        if self._tasks:
            logger.warning(
                "worker %s draining: %d task(s) in flight, waiting up to %g s for them "
                "(Ctrl-C again to stop at once); the rest go back to agent %s's queue",
                self.instance_id,
                len(self._tasks),
                grace_s,
                self.agent.agent_id,
            )
            await self._finish_or_hurry(grace_s)
        if self._tasks:
            self._handing_back.set()
            _done, pending = await asyncio.wait(set(self._tasks), timeout=HAND_BACK_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
            logger.warning(
                "worker %s: %d task(s) handed back to agent %s's queue%s",
                self.instance_id,
                self.handed_back,
                self.agent.agent_id,
                f" ({len(pending)} left to the broker's redelivery)" if pending else "",
            )
        await self.membership.stop()
        await self._release()

    async def _finish_or_hurry(self, grace_s: float) -> None:
        """Wait until no task is in flight, `grace_s` has passed, or `hurry` was called."""
        hurried = asyncio.ensure_future(self._hurried.wait())
        idle = asyncio.ensure_future(self._idle.wait())
        try:
            await asyncio.wait({hurried, idle}, timeout=grace_s, return_when="FIRST_COMPLETED")
        finally:
            hurried.cancel()
            idle.cancel()

    async def close(self) -> None:
        """`drain` with the runtime's `grace_s`; idempotent."""
        await self.drain()

    async def _release(self) -> None:
        self.hooks.detach("worker", self)
        await self.control.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        bands, self._bands = self._bands, None
        if bands is not None:
            await bands.close()
        await self.replied.close()
        await self.publisher.close()


#: what became of a run that sent no Result (`mesh.status` of its ``mesh.handle`` span)
_UNSETTLED = {
    "retry": "retrying",
    "reject": "rerouting",
    "completed": "handed_back",
    "failed": "handed_back",
    "expired": "handed_back",
}


def _pristine(message: AbstractIncomingMessage, envelope: TaskEnvelope) -> bool:
    """The first delivery of a first dispatch: no worker can have run this task yet."""
    return (
        not message.redelivered
        and envelope.attempt == 0
        and envelope.reroutes == 0
        and DEFERRED_HEADER not in (message.headers or {})
    )
