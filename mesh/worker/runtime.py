"""`WorkerRuntime`: runs an `Agent` as a queue worker on its agent queue.

Shutdown order (habit 10): stop consuming (heartbeats keep flowing) -> await in-flight
tasks, cancel stragglers -> result write + ack under `shield` -> deregister -> close.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.errors import Reject, Retry
from mesh.messaging import Publisher
from mesh.worker.agent import Agent
from mesh.worker.context import TaskContext
from mesh.worker.membership import Membership, StaticMembership
from mesh.worker.outcome import TRANSIENT_ERRORS, Outcome, settle
from schemas import Event, InvalidEnvelope, Result, TaskEnvelope, decode, new_id, now_ms

logger = logging.getLogger(__name__)


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
        self._channel: AbstractChannel | None = None
        self._consumers: list[tuple[AbstractQueue, str]] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._idle = asyncio.Event()
        self._idle.set()
        self.completed = 0

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    async def start(self) -> None:
        """Declare the agent's queue, register, and start consuming."""
        handler = self.agent.require_handler()
        del handler
        await self.publisher.start()
        await self.topology.declare(self.publisher.channel)
        await self.topology.declare(
            self.publisher.channel, self.topology.agent_spec(self.agent.agent_id)
        )
        await self.membership.start(lambda: self.in_flight)
        self._channel = await self.conn.channel(confirms=False, prefetch=self.agent.max_concurrency)
        for name, _weight in self.topology.agent_queues(self.agent.agent_id):
            queue = await self._channel.get_queue(name, ensure=False)
            tag = await queue.consume(self._on_message)
            self._consumers.append((queue, tag))
        logger.info("worker %s consuming agent=%s", self.instance_id, self.agent.agent_id)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        task = asyncio.create_task(self._run(message))
        self._tasks.add(task)
        self._idle.clear()
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not self._tasks:
            self._idle.set()
        if not task.cancelled() and task.exception() is not None:
            logger.critical("worker task crashed", exc_info=task.exception())

    async def _run(self, message: AbstractIncomingMessage) -> None:
        received = time.monotonic()
        try:
            envelope = decode(
                TaskEnvelope, message.body, max_payload_bytes=self.settings.max_payload_bytes
            )
        except InvalidEnvelope as exc:
            await self.publisher.dead_letter("invalid", exc.raw, details=exc.as_details())
            await message.ack()
            return
        left = self._time_left_ms(envelope)
        if left <= 0:
            outcome = Outcome(
                "expired",
                code="expired_in_queue",
                message="the task's deadline passed while it waited in the queue; not executed",
                details={"deadline_ms": envelope.deadline_ms},
            )
            await asyncio.shield(settle(self, message, envelope, outcome, {}))
            return
        outcome = await self._execute(envelope, left)
        timings = {"handler_ms": round((time.monotonic() - received) * 1000, 3)}
        await asyncio.shield(settle(self, message, envelope, outcome, timings))

    async def _execute(self, envelope: TaskEnvelope, left_ms: int) -> Outcome:
        handler = self.agent.require_handler()
        ctx = TaskContext(self, envelope)
        try:
            async with asyncio.timeout(left_ms / 1000.0):
                output = await handler(envelope, ctx)
        except Retry as exc:
            return Outcome("retry", message=exc.reason, delay_ms=exc.delay_ms)
        except Reject as exc:
            return Outcome("reject", message=exc.reason)
        except TimeoutError:
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
        if not isinstance(output, dict):
            return Outcome(
                "failed",
                code="bad_handler_output",
                message=f"handler returned {type(output).__name__}, expected dict",
            )
        return Outcome("completed", output=output)

    async def deliver(self, envelope: TaskEnvelope, result: Result) -> None:
        """Send the terminal Result of a task to its caller and record the event."""
        await self.publisher.reply(envelope.reply_to, result)
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
        channel, self._channel = self._channel, None
        if channel is not None and not channel.is_closed:
            await channel.close()
        await self.publisher.close()
