"""`TaskContext`: what a handler can see and do while it runs one task."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from schemas import TaskEnvelope, now_ms

if TYPE_CHECKING:
    from mesh.worker.runtime import WorkerRuntime


class TaskContext:
    """Handed to every handler call next to the task envelope."""

    def __init__(self, runtime: WorkerRuntime, envelope: TaskEnvelope) -> None:
        self._runtime = runtime
        self.envelope = envelope
        self.agent_id = runtime.agent.agent_id
        self.instance_id = runtime.instance_id
        self.token = runtime.membership.token
        self.logger = logging.LoggerAdapter(
            logging.getLogger(f"mesh.agent.{self.agent_id}"),
            {"task_id": envelope.task_id, "trace_id": envelope.trace_id},
        )

    @property
    def task_id(self) -> str:
        return self.envelope.task_id

    @property
    def trace_id(self) -> str:
        return self.envelope.trace_id

    @property
    def settings(self) -> Any:
        return self._runtime.settings

    @property
    def redis(self) -> Any:
        """The worker's Redis client, for handlers that keep state of their own."""
        return self._runtime.conn.redis

    def time_left_ms(self) -> int:
        """Milliseconds until the task's deadline (negative once it has passed)."""
        deadline = self.envelope.deadline_ms
        if deadline is None:
            return self.envelope.timeout_ms
        return deadline - now_ms()

    async def fence(self) -> None:
        """Raise `StaleFencingToken` if this instance's lease was lost since it took the task."""
        await self._runtime.membership.check(self.token)
