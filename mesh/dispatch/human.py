"""The human queue (degradation level 2): tasks no agent took, waiting for a person.

A router hands a task over (`HumanDesk.hand_over`) when nothing scored above the
threshold and no fallback agent is configured (`mesh.router.reasons.unmatched`): the task
moves to ``queued_for_human``, its envelope is kept in the desk (Redis: `Keys.human_desk`,
`Keys.human_task`) and published to the durable ``<ns>.human`` queue (quorum in quorum
mode) for a person's tool to take, and every caller gets an interim Result of status
``queued_for_human`` (not terminal: nothing is stored as the task's Result).

`mesh human` (`mesh.cli.human`) reads and writes the desk: `pending` lists it, `take`
claims one task for one person (``taken_by`` is set once, so two people never answer the
same task; without a task_id the next copy of the queue is taken, copies of tasks taken
or answered meanwhile are acked and skipped), and `answer` finishes the task like a worker
would: the terminal Result (``route.strategy="human"``) is stored with the task (its
history says who answered), and sent to every waiter whose reply queue still exists.

Under access control the desk is the router's: a caller accepts Results only from the
router's user, so ``mesh human`` runs with the router's credentials.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import aiormq.exceptions

from mesh.config import Settings
from mesh.dispatch.events import emit_states
from mesh.dispatch.store import TaskStore
from mesh.errors import HumanTaskError
from mesh.keys import Keys
from mesh.messaging import Publisher, split_waiter, waiter_of
from mesh.retrying import with_retries
from mesh.schemas import (
    ErrorInfo,
    InvalidEnvelope,
    Result,
    RouteInfo,
    TaskEnvelope,
    decode,
    encode,
    now_ms,
)
from mesh.topology import CODE_HEADER, SCORE_HEADER, THRESHOLD_HEADER

logger = logging.getLogger(__name__)

#: how a person's answer is marked in `route.strategy`
HUMAN_ROUTE = RouteInfo(strategy="human")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class HumanTask:
    """One task of the desk, as `mesh human list` shows it."""

    envelope: TaskEnvelope
    queued_ms: int
    code: str
    message: str
    score: float | None = None
    threshold: float | None = None
    taken_by: str = ""
    taken_ms: int = 0

    @property
    def task_id(self) -> str:
        return self.envelope.task_id

    def age_s(self, at_ms: int) -> float:
        return max(0, at_ms - self.queued_ms) / 1000

    @classmethod
    def from_hash(cls, raw: dict[Any, Any]) -> HumanTask | None:
        h = {_s(k): _s(v) for k, v in raw.items()}
        try:
            envelope = decode(TaskEnvelope, h["envelope"].encode())
            return cls(
                envelope=envelope,
                queued_ms=int(h["queued_ms"]),
                code=h.get("code", ""),
                message=h.get("message", ""),
                score=float(h["score"]) if h.get("score") else None,
                threshold=float(h["threshold"]) if h.get("threshold") else None,
                taken_by=h.get("taken_by", ""),
                taken_ms=int(h.get("taken_ms", 0) or 0),
            )
        except (KeyError, ValueError, InvalidEnvelope):
            return None

    def as_dict(self, at_ms: int) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "age_s": round(self.age_s(at_ms), 1),
            "text": self.envelope.capability,
            "payload": self.envelope.payload,
            "score": self.score,
            "threshold": self.threshold,
            "code": self.code,
            "taken_by": self.taken_by or None,
        }


@dataclass(frozen=True, slots=True)
class Answered:
    """What `HumanDesk.answer` did: the Result, and which waiters' reply queues were there."""

    result: Result
    delivered: tuple[str, ...]
    missing: tuple[str, ...]


class HumanDesk:
    """The desk of one namespace, over a started `Publisher` (router, or `mesh human`)."""

    def __init__(self, publisher: Publisher, store: TaskStore, settings: Settings) -> None:
        self.publisher = publisher
        self.store = store
        self.redis = store.redis
        self.keys: Keys = store.keys
        self.topology = publisher.topology
        self.ttl_s = settings.idempotency_ttl_s

    # --- the router's side ----------------------------------------------------------------
    async def hand_over(
        self, envelope: TaskEnvelope, details: dict[str, Any], error: ErrorInfo, *, by: str
    ) -> Result | None:
        """Move the task to ``queued_for_human``, keep and publish it, answer its callers
        with the interim Result (returned; None when the task was finished meanwhile)."""
        task_id = envelope.task_id
        moved = await self.store.advance(
            task_id, "routing", "queued_for_human", by=by, note=error.code
        )
        if moved is None:
            return None
        queued = now_ms()
        score, threshold = details.get("best_score"), details.get("threshold")
        fields = {
            "envelope": encode(envelope),
            "queued_ms": queued,
            "code": error.code,
            "message": error.message,
            "score": "" if score is None else f"{score}",
            "threshold": "" if threshold is None else f"{threshold}",
        }
        pipe = self.redis.pipeline(transaction=True)
        pipe.hset(self.keys.human_task(task_id), mapping=fields)
        pipe.expire(self.keys.human_task(task_id), self.ttl_s)
        pipe.zadd(self.keys.human_desk(), {task_id: queued})
        pipe.expire(self.keys.human_desk(), self.ttl_s)
        await pipe.execute()
        headers: dict[str, Any] = {CODE_HEADER: error.code}
        if score is not None:
            headers[SCORE_HEADER] = float(score)
        if threshold is not None:
            headers[THRESHOLD_HEADER] = float(threshold)
        await with_retries(
            lambda: self.publisher.publish_envelope(
                self.topology.human, self.topology.human_key, envelope, headers=headers
            )
        )
        interim = Result(
            task_id=task_id,
            trace_id=envelope.trace_id,
            status="queued_for_human",
            error=error,
            route=RouteInfo(
                strategy="human", score=None if score is None else float(score), low_confidence=True
            ),
            hops=envelope.hops,
        )
        waiters = set(await self.store.waiters(task_id))
        own = waiter_of(envelope)
        if own:
            waiters.add(own)
        for each in sorted(waiters):
            await with_retries(lambda w=each: self.publisher.reply(w, interim))  # type: ignore[misc]
        await emit_states(
            self.publisher,
            moved,
            task_id=task_id,
            trace_id=envelope.trace_id,
            data={"code": error.code, "message": error.message},
        )
        logger.info("task_id=%s handed to a person (%s)", task_id, error.code)
        return interim

    # --- a person's side ------------------------------------------------------------------
    async def pending(self) -> list[HumanTask]:
        """Every task waiting for a person, oldest first (taken ones too, marked)."""
        ids = [_s(i) for i in await self.redis.zrange(self.keys.human_desk(), 0, -1)]
        if not ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for task_id in ids:
            pipe.hgetall(self.keys.human_task(task_id))
        found, gone = [], []
        for task_id, raw in zip(ids, await pipe.execute(), strict=True):
            task = HumanTask.from_hash(raw) if raw else None
            if task is None:
                gone.append(task_id)
            else:
                found.append(task)
        if gone:  # expired records (idempotency_ttl_s)
            await self.redis.zrem(self.keys.human_desk(), *gone)
        return found

    async def get(self, task_id: str) -> HumanTask | None:
        raw = await self.redis.hgetall(self.keys.human_task(task_id))
        return HumanTask.from_hash(raw) if raw else None

    async def take(self, task_id: str | None, who: str) -> HumanTask | None:
        """Claim `task_id` for `who` (None: the next task of the queue); the task, or None
        when nothing waits.

        Raises:
            HumanTaskError: the task is not in the human queue, or someone else took it.
        """
        if task_id is None:
            return await self._take_next(who)
        task = await self.get(task_id)
        if task is None:
            raise HumanTaskError(
                f"task {task_id} is not waiting for a person (answered already, never handed "
                "over, or older than MESH_IDEMPOTENCY_TTL_S): `mesh task` shows it"
            )
        key = self.keys.human_task(task_id)
        await self.redis.hsetnx(key, "taken_ms", now_ms())
        if not await self.redis.hsetnx(key, "taken_by", who):
            taker = _s(await self.redis.hget(key, "taken_by") or b"")
            if taker != who:
                raise HumanTaskError(f"task {task_id} was taken by {taker!r}; they answer it")
        return await self.get(task_id)

    async def _take_next(self, who: str) -> HumanTask | None:
        """The next copy of the human queue that nobody took (stale copies acked), else
        the oldest untaken task of the desk (its copy expired from the queue)."""
        channel = await self.publisher.conn.channel(confirms=False)
        try:
            queue = await channel.get_queue(self.topology.human, ensure=False)
            while (message := await queue.get(no_ack=False, fail=False)) is not None:
                task = await self._claim_copy(message.body, who)
                await message.ack()
                if task is not None:
                    return task
        finally:
            await channel.close()
        for task in await self.pending():
            if not task.taken_by:
                try:
                    return await self.take(task.task_id, who)
                except HumanTaskError:
                    continue  # taken a moment ago by someone else
        return None

    async def _claim_copy(self, body: bytes, who: str) -> HumanTask | None:
        try:
            envelope = decode(TaskEnvelope, body)
        except InvalidEnvelope:
            logger.warning("a message of %s is no task envelope; dropped", self.topology.human)
            return None
        task = await self.get(envelope.task_id)
        if task is None or task.taken_by:
            return None  # answered or taken meanwhile: a stale copy
        try:
            return await self.take(envelope.task_id, who)
        except HumanTaskError:
            return None

    async def answer(
        self,
        task_id: str,
        who: str,
        *,
        output: dict[str, Any] | None = None,
        error: str | None = None,
    ) -> Answered:
        """Finish the task with a person's answer (`output`: completed; `error`: failed)
        and send the Result to every waiter whose reply queue still exists.

        Raises:
            HumanTaskError: not waiting for a person, or taken by someone else.
        """
        task = await self.take(task_id, who)
        assert task is not None
        envelope = task.envelope
        if error is None:
            result = Result(
                task_id=task_id,
                trace_id=envelope.trace_id,
                status="completed",
                output=output or {},
                route=HUMAN_ROUTE,
                hops=envelope.hops,
            )
        else:
            result = Result(
                task_id=task_id,
                trace_id=envelope.trace_id,
                status="failed",
                error=ErrorInfo(code="human_declined", message=error[:8_000]),
                route=HUMAN_ROUTE,
                hops=envelope.hops,
            )
        by = f"human:{who}"[:128]
        commit = await self.store.finish(result, result.status, by=by, note="answered by a person")
        if commit.status != "ok":
            raise HumanTaskError(f"task {task_id} was finished already ({commit.status})")
        delivered, missing = [], []
        for waiter in sorted(set(commit.waiters) | {waiter_of(envelope) or ""} - {""}):
            if await self._reply_queue_exists(waiter):
                await with_retries(lambda w=waiter: self.publisher.reply(w, result))  # type: ignore[misc]
                delivered.append(waiter)
            else:
                missing.append(waiter)
        if delivered:
            await self.store.mark_replied(task_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.zrem(self.keys.human_desk(), task_id)
        pipe.delete(self.keys.human_task(task_id))
        await pipe.execute()
        await emit_states(
            self.publisher,
            (result.status,),
            task_id=task_id,
            trace_id=envelope.trace_id,
            data={"by": by, "route": HUMAN_ROUTE.model_dump()},
        )
        return Answered(result, tuple(delivered), tuple(missing))

    async def _reply_queue_exists(self, waiter: str) -> bool:
        """Whether the reply queue of `waiter` is on the broker (a passive declare, on a
        channel of its own: a missing queue closes the channel)."""
        reply_to, _ = split_waiter(waiter)
        channel = await self.publisher.conn.channel(confirms=False)
        try:
            await channel.declare_queue(reply_to, passive=True)
            return True
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        finally:
            if not channel.is_closed:
                await channel.close()


__all__ = ["HUMAN_ROUTE", "Answered", "HumanDesk", "HumanTask"]
