"""`WorkerRuntime`: runs an `Agent` as a queue worker on its agent queue.

Per delivery: decode -> claim the task_id under this instance's fencing token (a duplicate
or a finished task is not run again) -> check the deadline -> run the handler, cancelled at
min(deadline, max task lifetime) -> `outcome.settle` (fenced commit, replies, ack).

Shutdown order (habit 10): stop consuming (heartbeats keep flowing) -> await in-flight
tasks, cancel stragglers -> result write + ack under `shield` -> deregister -> close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING, Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.dispatch.context import ContextStore
from mesh.dispatch.events import emit_states
from mesh.dispatch.store import Holder, ReplyMarks, TaskStore
from mesh.errors import Reject, Retry
from mesh.messaging import Publisher, envelope_message
from mesh.retrying import TRANSIENT_ERRORS as OUTAGE_ERRORS
from mesh.retrying import quietly, with_retries
from mesh.topology import DELAY_HEADER
from mesh.worker.agent import Agent
from mesh.worker.context import TaskContext
from mesh.worker.control import ControlConsumer
from mesh.worker.membership import Membership, StaticMembership
from mesh.worker.outcome import (
    TRANSIENT_ERRORS,
    Outcome,
    check_output,
    nearest_delay,
    settle,
)
from schemas import Event, InvalidEnvelope, Result, TaskEnvelope, decode, new_id, now_ms

if TYPE_CHECKING:
    from mesh.client import MeshClient

logger = logging.getLogger(__name__)

#: a trace visiting the same agent more often than this raises `alert.loop`
LOOP_VISITS = 2
#: a task whose handler ended this long ago and whose delivery is still not settled is
#: reported stuck (heartbeats carry the count; `mesh agents` shows it)
STUCK_AFTER_S = 30.0


def current_task() -> asyncio.Task[Any]:
    task = asyncio.current_task()
    if task is None:  # pragma: no cover - always called from a task
        raise RuntimeError("not in a task")
    return task


class WorkerRuntime:
    """One worker instance of an agent. ``await start()``; ``await drain()`` to stop."""

    def __init__(
        self,
        agent: Agent,
        conn: MeshConnection,
        *,
        instance_id: str | None = None,
        membership: Membership | None = None,
    ) -> None:
        self.agent = agent
        self.conn = conn
        self.settings = conn.settings
        self.topology = conn.topology
        self.instance_id = instance_id or f"{agent.agent_id}-{new_id()[:12]}"
        self.membership: Membership = membership or StaticMembership(agent.agent_id)
        self.publisher = Publisher(conn)
        self.store = TaskStore(conn.redis, conn.keys, conn.settings)
        self.replied = ReplyMarks(self.store)
        self.contexts = ContextStore(conn.redis, conn.keys, conn.settings.context_ttl_s)
        self._channels: list[AbstractChannel] = []
        self._consumers: list[tuple[AbstractQueue, str]] = []
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
        self.completed = 0
        self.executed = 0

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
                    self.instance_id, count, STUCK_AFTER_S,
                    self.agent.max_concurrency - self.in_flight, self.agent.max_concurrency,
                )
        return count

    def holder(self) -> Holder:
        """This instance as a claim holder, with its current fencing token."""
        fenced = not isinstance(self.membership, StaticMembership)
        return Holder(self.instance_id, self.membership.token, fenced)

    async def start(self) -> None:
        """Declare the agent's queue, register, and start consuming."""
        self.agent.require_handler()
        await self.publisher.start()
        await self.topology.declare(self.publisher.channel)
        await self.topology.declare(
            self.publisher.channel, self.topology.agent_spec(self.agent.agent_id)
        )
        await self.membership.start(lambda: self.in_flight, self.stuck)
        queues = self.topology.agent_queues(self.agent.agent_id)
        total = sum(weight for _, weight in queues)
        for name, weight in queues:
            # quorum bands: one channel each, prefetch in proportion to the band's weight,
            # so a backlog drains high:normal:low at 5:3:1 (seed 002 section 7.3)
            share = max(1, round(self.agent.max_concurrency * weight / total))
            channel = await self.conn.channel(confirms=False, prefetch=share)
            self._channels.append(channel)
            # passive declare: tracked by the robust channel, consumer restored on reconnect
            queue = await channel.get_queue(name, ensure=True)
            tag = await queue.consume(self._on_message)
            self._consumers.append((queue, tag))
        await self.control.start()
        logger.info("worker %s consuming agent=%s", self.instance_id, self.agent.agent_id)

    async def client(self) -> MeshClient:
        """The reply queue this worker waits on for handoff Results (opened on first use)."""
        from mesh.client import MeshClient

        async with self._client_lock:
            if self._client is None:
                client = MeshClient(self.conn, client_id=self.instance_id)
                await client.start()
                self._client = client
            return self._client

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        task = asyncio.create_task(self._run(message))
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

    async def _run(self, message: AbstractIncomingMessage) -> None:
        try:
            envelope = decode(
                TaskEnvelope, message.body, max_payload_bytes=self.settings.max_payload_bytes
            )
        except InvalidEnvelope as exc:
            await self.publisher.dead_letter("invalid", exc.raw, details=exc.as_details())
            await quietly(message.ack())
            return
        running = self._running.get(envelope.task_id)
        if running is not None:
            # redelivered while still running here (a reconnect): settle it with the run
            await asyncio.wait({running})
            await quietly(message.ack())
            return
        self._running[envelope.task_id] = current_task()
        try:
            await self._claimed_run(message, envelope)
        except OUTAGE_ERRORS:
            logger.warning(
                "task_id=%s: transient failure; requeued", envelope.task_id, exc_info=True
            )
            await quietly(message.nack(requeue=True))
        except Exception:
            # a bug in settling must not wedge the instance: the delivery is settled anyway
            # (dead-lettered back to a router, which ends or reroutes the task)
            logger.critical(
                "task_id=%s: settling failed; the delivery is rejected", envelope.task_id,
                exc_info=True,
            )
            await quietly(message.nack(requeue=False))
        finally:
            self._running.pop(envelope.task_id, None)

    async def _claimed_run(self, message: AbstractIncomingMessage, envelope: TaskEnvelope) -> None:
        received = time.monotonic()
        holder = self.holder()
        lifetime_ms = int(self.settings.max_task_lifetime_s * 1000)
        claim = await self.store.claim(
            envelope,
            holder,
            agent_id=self.agent.agent_id,
            redelivered=bool(message.redelivered),
            lifetime_end_ms=now_ms() + lifetime_ms,
            count_visit=envelope.attempt == 0,
        )
        if claim.status == "done":
            logger.info("task_id=%s already done; not run again", envelope.task_id)
            if not claim.replied and claim.result is not None:
                # the first run committed but died before replying
                await self._reply_all(envelope, claim.result, ())
            await quietly(message.ack())
            return
        if claim.status == "stale":
            logger.warning("task_id=%s: our lease is gone; handing the task back", envelope.task_id)
            await quietly(message.nack(requeue=True))
            return
        if claim.status == "busy":
            await self._defer(message, envelope, claim.detail)
            return
        if claim.status != "claimed":
            logger.info("task_id=%s not run: %s %s", envelope.task_id, claim.status, claim.detail)
            await quietly(message.ack())
            return
        await emit_states(
            self.publisher,
            ("accepted", "processing"),
            task_id=envelope.task_id,
            trace_id=envelope.trace_id,
            agent_id=self.agent.agent_id,
            instance_id=self.instance_id,
            data={"takeover": claim.takeover, "attempt": envelope.attempt},
        )
        if claim.visits > LOOP_VISITS:
            await self._loop_alert(envelope, claim.visits)
        left = self._time_left_ms(envelope)
        if left <= 0:
            outcome = Outcome(
                "expired",
                code="expired_in_queue",
                message="the task's deadline passed while it waited in the queue; not executed",
                details={"deadline_ms": envelope.deadline_ms},
            )
            await asyncio.shield(settle(self, message, envelope, outcome, {}, holder))
            return
        outcome = await self._execute(envelope, left, lifetime_ms, holder)
        self._settling[current_task()] = time.monotonic()
        timings = {"handler_ms": round((time.monotonic() - received) * 1000, 3)}
        await asyncio.shield(settle(self, message, envelope, outcome, timings, holder))

    async def _defer(
        self, message: AbstractIncomingMessage, envelope: TaskEnvelope, holder: str
    ) -> None:
        """Another instance holds the claim: look again later, through a retry delay queue.

        Either the holder finishes (the next look finds the result) or its lease lapses
        (the next look takes the claim over). Acking instead would lose the task if the
        holder is dead but its lease has not run out yet.
        """
        delay = nearest_delay(
            self.topology.retry_delays_ms, int(self.settings.lease_ttl_s * 1000 / 3)
        )
        logger.info(
            "task_id=%s held by %s; looking again in %d ms", envelope.task_id, holder, delay
        )
        exchange = await self.publisher.exchange(self.topology.retry)
        await with_retries(
            lambda: exchange.publish(
                envelope_message(
                    envelope, headers={DELAY_HEADER: str(delay), "x-mesh-deferred": holder}
                ),
                routing_key=self.topology.agent_routing_key(self.agent.agent_id, envelope.priority),
                mandatory=False,
            )
        )
        await quietly(message.ack())

    async def _loop_alert(self, envelope: TaskEnvelope, visits: int) -> None:
        """Loop detection: the same trace on the same agent more than twice is an alert."""
        if visits > LOOP_VISITS:
            logger.warning(
                "loop: trace_id=%s visited agent=%s %d times",
                envelope.trace_id,
                self.agent.agent_id,
                visits,
            )
            await self.publisher.emit(
                Event(
                    type="alert.loop",
                    trace_id=envelope.trace_id,
                    task_id=envelope.task_id,
                    agent_id=self.agent.agent_id,
                    instance_id=self.instance_id,
                    data={
                        "visits": visits,
                        "trajectory": [*envelope.trajectory, self.agent.agent_id],
                        "hops": envelope.hops,
                    },
                )
            )

    async def _execute(
        self, envelope: TaskEnvelope, left_ms: int, lifetime_ms: int, holder: Holder
    ) -> Outcome:
        handler = self.agent.require_handler()
        ctx = TaskContext(self, envelope, holder)
        limit_ms = min(left_ms, lifetime_ms)
        self.executed += 1
        try:
            async with asyncio.timeout(limit_ms / 1000.0) as scope:
                output = await handler(envelope, ctx)
        except Retry as exc:
            return Outcome("retry", message=exc.reason, delay_ms=exc.delay_ms)
        except Reject as exc:
            return Outcome("reject", message=exc.reason)
        except TimeoutError as exc:
            if not scope.expired():
                return Outcome("retry", message=f"{type(exc).__name__}: {exc}")
            if limit_ms < left_ms:
                return Outcome(
                    "failed",
                    code="lifetime_exceeded",
                    message="cancelled after max_task_lifetime_s="
                    f"{self.settings.max_task_lifetime_s}",
                )
            return Outcome(
                "expired",
                code="deadline_passed",
                message="the handler was cancelled at the task's deadline",
            )
        except TRANSIENT_ERRORS as exc:
            return Outcome("retry", message=f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            logger.warning("handler failed task_id=%s", envelope.task_id, exc_info=True)
            return Outcome("failed", code="handler_error", message=f"{type(exc).__name__}: {exc}")
        return check_output(output, self.settings.max_payload_bytes)

    async def _reply_all(self, envelope: TaskEnvelope, result: Result, waiters: Any) -> None:
        """Send `result` to every recorded reply_to of the task (and the envelope's own)."""
        targets = set(waiters)
        if envelope.reply_to:
            targets.add(envelope.reply_to)
        for reply_to in sorted(targets):
            await self._reply(reply_to, result)
        self.replied.mark(envelope.task_id)

    async def _reply(self, reply_to: str, result: Result) -> None:
        await with_retries(lambda: self.publisher.reply(reply_to, result))

    async def deliver(self, envelope: TaskEnvelope, result: Result, waiters: Any = ()) -> None:
        """Send the terminal Result of a task to its callers and record the event."""
        await self._reply_all(envelope, result, waiters)
        if result.status == "completed":
            self.completed += 1
        await self.publisher.emit(
            Event(
                type=f"task.{result.status}",
                trace_id=envelope.trace_id,
                task_id=envelope.task_id,
                agent_id=self.agent.agent_id,
                instance_id=self.instance_id,
                data={"error": result.error.code if result.error else None},
            )
        )

    @staticmethod
    def _time_left_ms(envelope: TaskEnvelope) -> int:
        if envelope.deadline_ms is None:
            return envelope.timeout_ms
        return envelope.deadline_ms - now_ms()

    async def run_until_idle(self, timeout: float = 10.0) -> None:
        """Wait until no task is in flight (for tests and drains)."""
        async with asyncio.timeout(timeout):
            await self._idle.wait()

    async def drain(self, grace_s: float = 30.0) -> None:
        """Stop taking tasks, finish (or cancel) in-flight ones, deregister, close."""
        await self.control.close()  # a draining instance no longer bids
        for queue, tag in self._consumers:
            try:
                await queue.cancel(tag)
            except (aio_pika.exceptions.AMQPError, RuntimeError):
                logger.debug("cancel failed during drain", exc_info=True)
        self._consumers.clear()
        if self._tasks:
            _done, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=5)
        await self.membership.stop()
        await self.close()

    async def close(self) -> None:
        await self.control.close()
        client, self._client = self._client, None
        if client is not None:
            await client.close()
        channels, self._channels = self._channels, []
        for channel in channels:
            if not channel.is_closed:
                await channel.close()
        await self.replied.close()
        await self.publisher.close()
