"""How a worker's Result reaches its callers: chosen once per instance, by access control.

`DirectAnswers` (access control off): the commit returns the task's waiters and the worker
replies to each. `NoticeAnswers` (access control on): the worker seals its Result under its
own agent's keys, reads no waiters (its Redis user may not) and tells a router, which
checks who sent the notice and forwards the sealed copy (`mesh.router.results`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from mesh.config import Settings
from mesh.dispatch.store import ReplyMarks
from mesh.messaging import Publisher, encoded_result_message, waiter_of
from mesh.retrying import with_retries
from mesh.schemas import Result, TaskEnvelope
from mesh.topology import Topology


class Answers(Protocol):
    #: the commit returns the task's waiters (the worker answers them itself)
    with_waiters: bool
    #: the commit seals the Result under the agent's own keys (a router forwards it)
    seal: bool

    async def answer(
        self,
        envelope: TaskEnvelope,
        result: Result,
        waiters: Iterable[str],
        body: bytes,
    ) -> None:
        """Send `result` to the task's callers (or have a router send it); `body` is
        `result` encoded (the bytes the commit stored)."""


class DirectAnswers:
    with_waiters = True
    seal = False

    def __init__(self, publisher: Publisher, replied: ReplyMarks) -> None:
        self.publisher = publisher
        self.replied = replied

    async def answer(
        self,
        envelope: TaskEnvelope,
        result: Result,
        waiters: Iterable[str],
        body: bytes,
    ) -> None:
        """Every recorded reply_to of the task, and the envelope's own."""
        targets = set(waiters)
        own = waiter_of(envelope)
        if own:
            targets.add(own)
        for reply_to in sorted(targets):
            await self._reply(reply_to, result.task_id, body)
        self.replied.mark(envelope.task_id)

    async def _reply(self, reply_to: str, task_id: str, body: bytes) -> None:
        await with_retries(lambda: self.publisher.reply_encoded(reply_to, body, task_id))


class NoticeAnswers:
    with_waiters = False
    seal = True

    def __init__(self, publisher: Publisher, topology: Topology) -> None:
        self.publisher = publisher
        self.topology = topology

    async def answer(
        self,
        envelope: TaskEnvelope,
        result: Result,
        waiters: Iterable[str],
        body: bytes,
    ) -> None:
        exchange = await self.publisher.exchange(self.topology.results)
        notice = encoded_result_message(body, result.task_id)
        await with_retries(
            lambda: self.publisher.send(
                exchange, notice, self.topology.results_key, mandatory=False
            )
        )


def answers_for(
    settings: Settings, publisher: Publisher, topology: Topology, replied: ReplyMarks
) -> Answers:
    if settings.access_control:
        return NoticeAnswers(publisher, topology)
    return DirectAnswers(publisher, replied)


__all__ = ["Answers", "DirectAnswers", "NoticeAnswers", "answers_for"]
