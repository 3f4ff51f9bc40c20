"""`TaskStore`: task state, claims and stored results in Redis, one Redis function per step.

Layout (keys from `mesh.keys.Keys`): ``task(id)`` hash (state, trace_id, agent_id, times),
``task_history(id)`` list of ``{state, ts_ms, by, note}``, ``task_waiters(id)`` set of every
reply_to recorded for the task_id, ``idem(id)`` hash (claim holder, token, the stored
result), ``processing()`` zset of claimed tasks by the end of their maximum lifetime.
Everything expires ``settings.idempotency_ttl_s`` after a task's last step (at least 99 %
of it: steps a moment apart set a record's expiry once, its ``expires_ms`` field says when
it ends; `mesh.dispatch.lua`).

Under access control the records are the mesh's: a worker's Redis user may not read or
write them. Each agent has a view instead (`Keys.for_agent`: the same families under
``<prefix>:agent/<id>/``), which one ACL pattern gives that agent's workers and nobody
else's; a router seeds a task's record in the view of the agent it dispatches to (`seed`),
the worker claims, commits and applies side effects there (a `TaskStore` on the view, with
the mesh's instance keys for the fencing check), and a router finishes the mesh's record
from the view when the worker's notice comes (`mesh.router.results`). A store on the
mesh's keys under access control (``views``) reads the views too: `history` and
`holder_of` show what the agents recorded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mesh.config import Settings
from mesh.dispatch import lua
from mesh.dispatch.context import seed_keys
from mesh.functions import CallBatch
from mesh.keys import Keys
from mesh.messaging import waiter_of
from mesh.schemas import InvalidEnvelope, Result, TaskEnvelope, decode, encode
from mesh.schemas.codec import loads

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Holder:
    """Who claims a task: an instance, its fencing token, and whether it holds a lease."""

    instance_id: str
    token: int
    #: False for a worker without a registry session: no lease to check
    fenced: bool = True


@dataclass(frozen=True, slots=True)
class Submission:
    """What the router learns when it records a task from the ingress queue."""

    status: Literal["new", "done", "answered", "pending", "resume", "refused", "foreign"]
    state: str = ""
    result: Result | None = None
    #: a new task's dispatch was seeded with its record (`TaskStore.submit`'s `seed_until`)
    seeded: bool = False


@dataclass(frozen=True, slots=True)
class Claim:
    """What a worker learns when it claims a delivered task."""

    status: Literal["claimed", "done", "busy", "stale", "refused"]
    takeover: bool = False
    #: visits of the task's trace to this agent, this one included (0: not counted)
    visits: int = 0
    #: the task was known before its record vanished: its side effects are refused
    recovered: bool = False
    result: Result | None = None
    replied: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Commit:
    """The answer to a result commit: ``ok`` with every reply_to to answer, or why not."""

    status: Literal["ok", "done", "stale", "refused"]
    waiters: tuple[str, ...] = ()
    result: Result | None = None
    detail: str = ""
    #: ``ok``: the Result as stored, encoded once (the replies send these bytes)
    body: bytes = b""


@dataclass(frozen=True, slots=True)
class Relay:
    """What a router learns when it takes a worker's result notice (`TaskStore.relay`)."""

    #: ``ok`` (the mesh's record finished now) and ``again`` (finished from this very
    #: Result before, its callers not told yet) answer `waiters` with `body`; ``done`` (it
    #: ended otherwise first), ``foreign`` (not dispatched to the agent), ``unsealed`` (the
    #: agent sealed nothing), ``invalid`` (its copy is not a terminal Result of the task)
    #: and ``refused`` (the record cannot end) answer nobody
    status: Literal["ok", "again", "done", "foreign", "unsealed", "invalid", "refused"]
    #: the agent's sealed Result, as stored (forwarded without decoding it)
    body: bytes = b""
    waiters: tuple[str, ...] = ()
    #: ``foreign``: the agents the task went to; ``done``: its status; ``refused``: state
    detail: str = ""


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _relay_of(reply: Any) -> Relay:
    status = _s(reply[0])
    if status in {"ok", "again"}:
        body = reply[1] if isinstance(reply[1], bytes) else str(reply[1]).encode()
        return Relay(status, body, tuple(_s(w) for w in reply[2:]))  # type: ignore[arg-type]
    if status == "foreign":
        return Relay("foreign", detail=", ".join(sorted(_s(a) for a in reply[1:])))
    detail = _s(reply[1]) if len(reply) > 1 else ""
    return Relay(status, detail=detail)  # type: ignore[arg-type]


def _result(raw: Any) -> Result | None:
    try:
        return decode(Result, raw if isinstance(raw, bytes) else str(raw).encode())
    except InvalidEnvelope:
        logger.error("stored result does not decode: %r", raw[:200])
        return None


class TaskStore:
    """The dispatch records of one namespace. Cheap to build; holds no connection itself."""

    def __init__(
        self, redis: Any, keys: Keys, settings: Settings, *, instances: Keys | None = None
    ) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_ms = settings.idempotency_ttl_s * 1000
        self.context_ttl_ms = settings.context_ttl_s * 1000
        #: the mesh's own keys (a view's store reads the instance hashes for the fencing
        #: check there, and seals a Result there: `Keys.sealed`)
        self.mesh = instances or keys
        self.instance_prefix = self.mesh.instance_prefix()
        #: the mesh's records under access control: each agent's steps are in its view
        self.views = settings.access_control and not keys.view
        # Redis functions (FCALL), loaded by the operator or on first use (`mesh.functions`);
        # every call goes in one pipeline with the calls made beside it on the client (a
        # router's submissions and steps, a worker's claims and commits: `CallBatch`)
        self._seed = lua.LIBRARY.bind(redis, "seed", batched=True)
        self._relay = lua.LIBRARY.bind(redis, "relay", batched=True)
        self._advance = lua.LIBRARY.bind(redis, "advance", batched=True)
        self._submit = lua.LIBRARY.bind(redis, "submit", batched=True)
        self._claim = lua.LIBRARY.bind(redis, "claim", batched=True)
        self._finish = lua.LIBRARY.bind(redis, "finish", batched=True)
        self._release = lua.LIBRARY.bind(redis, "release", batched=True)
        self._apply_once = lua.LIBRARY.bind(redis, "apply_once", batched=True)

    def _task_keys(self, task_id: str) -> list[str]:
        return [self.keys.task(task_id), self.keys.task_history(task_id)]

    async def submit(
        self,
        envelope: TaskEnvelope,
        *,
        redelivered: bool,
        states: Sequence[str],
        by: str,
        agent_id: str = "",
        recovered: bool = False,
        sender: str = "",
        sender_agent: str = "",
        seed_until: int | None = None,
    ) -> Submission:
        """Record a task arriving at ingress, or recognise a duplicate of one (atomic).

        A new task follows `states` in the same step (the router passes ``dispatched``
        with the chosen `agent_id` when it chose before recording: one round trip).

        A duplicate's reply_to joins the task's waiters; ``resume`` means a redelivered
        message whose first router died before dispatching it; ``answered`` a redelivered
        message of a finished task whose caller got the Result already.

        `recovered` records a task the broker still held after its record vanished (Redis
        lost its data): its side effects are refused from then on (`apply_once`).

        Under access control `sender` is the broker user who sent the task: the task_id is
        that user's while its record lives (anyone else's submission is ``foreign``, never
        joined nor answered). A client's task and trace_id are its own; a worker's
        (`sender_agent`: its agent) must be a handoff of a task dispatched to that agent,
        on that task's trace, and belong to that task's owner.

        With `seed_until` (under access control: the end of the task's maximum lifetime) a
        new task dispatched to `agent_id` is seeded for that dispatch in the same step
        (`seed`); nothing is seeded for a duplicate.
        """
        k = self.keys
        task_id = envelope.task_id
        seeding = seed_until is not None and bool(agent_id)
        seeded = (
            [
                k.dispatched_to(task_id),
                k.for_agent(agent_id).task(task_id),
                k.processing(),
                *seed_keys(k, envelope, agent_id),
            ]
            if seeding
            else []
        )
        reply = await self._submit(
            keys=[
                *self._task_keys(envelope.task_id),
                k.task_waiters(envelope.task_id),
                k.idem(envelope.task_id),
                k.trace_owner(envelope.trace_id),
                k.task(envelope.parent_task_id or ""),
                k.dispatched_to(envelope.parent_task_id or ""),
                *seeded,
            ],
            args=[
                self.ttl_ms,
                by,
                waiter_of(envelope) or "",
                "1" if redelivered else "0",
                envelope.trace_id,
                agent_id,
                "1" if recovered else "0",
                sender,
                sender_agent,
                seed_until if seeding else "",
                self.context_ttl_ms,
                *states,
            ],
        )
        status = _s(reply[0])
        if status == "done":
            return Submission("done", result=_result(reply[1]))
        if status == "answered":
            return Submission("answered")
        if status == "foreign":
            return Submission("foreign")
        if status in {"pending", "resume", "refused"}:
            return Submission(status, state=_s(reply[1]))  # type: ignore[arg-type]
        return Submission("new", seeded=seeding)

    async def advance(
        self, task_id: str, *states: str, by: str, note: str = "", agent_id: str = ""
    ) -> list[str] | None:
        """Follow `states` (all or nothing); the states applied, or None when refused."""
        reply = await self._advance(
            keys=self._task_keys(task_id),
            args=[self.ttl_ms, by, note[:500], agent_id, *states],
        )
        if int(reply[0]) != 1:
            logger.info(
                "task_id=%s: transition %s refused from state %r", task_id, states, _s(reply[1])
            )
            return None
        return [_s(s) for s in reply[1:]]

    async def claim(
        self,
        envelope: TaskEnvelope,
        holder: Holder,
        *,
        agent_id: str,
        redelivered: bool,
        lifetime_end_ms: int,
        count_visit: bool = False,
        pristine: bool = False,
    ) -> Claim:
        """Claim a task before running it (atomic with its move to ``processing``).

        With `count_visit`, a claim that is not a takeover also counts one more visit of the
        task's trace to `agent_id` (loop detection), in the same step.

        `pristine` says the delivery is the first of a first dispatch (not redelivered, no
        retry, reroute or deferral), so nobody can have run it: when its record is missing it
        is simply created. Any other delivery without a record is ``recovered``.
        """
        k = self.keys
        reply = await self._claim(
            keys=[
                k.idem(envelope.task_id),
                *self._task_keys(envelope.task_id),
                k.processing(),
                k.trace_visits(envelope.trace_id),
            ],
            args=[
                self.ttl_ms,
                self.instance_prefix,
                holder.instance_id,
                holder.token,
                "1" if holder.fenced else "0",
                "1" if redelivered else "0",
                lifetime_end_ms,
                agent_id,
                "1" if count_visit else "0",
                "1" if pristine else "0",
                envelope.trace_id,
            ],
        )
        status = _s(reply[0])
        if status == "claimed":
            return Claim(
                "claimed",
                takeover=_s(reply[1]) == "1",
                visits=int(reply[2]),
                recovered=_s(reply[3]) == "1",
            )
        if status == "done":
            return Claim("done", result=_result(reply[1]), replied=_s(reply[2]) == "1")
        detail = _s(reply[1]) if len(reply) > 1 else ""
        return Claim(status, detail=detail)  # type: ignore[arg-type]

    async def finish(
        self,
        result: Result,
        *states: str,
        by: str,
        holder: Holder | None = None,
        note: str = "",
        agent_id: str = "",
        with_waiters: bool = True,
        seal: bool = False,
        quiet: bool = False,
    ) -> Commit:
        """Store the terminal Result and move to its state; fenced when `holder` is given.

        Without `with_waiters` the waiters are neither read nor returned (a caller that
        does not answer them: a worker under access control, whose Redis user may not).
        With `seal` (a worker under access control) the Result is also kept under
        `Keys.sealed` of `agent_id`, the copy a router forwards.

        With `quiet` the states move without history lines (a router finishing the mesh's
        record from an agent's view, which has them). The mesh ending a task itself (no
        `holder`) on a store with `views` writes the Result into the view of the task's
        agent too, so that agent's late commit finds the task done.

        Returns every reply_to recorded for the task (``ok``), or the Result stored before
        (``done``), or ``stale`` when `holder` no longer holds the claim or its lease.
        """
        k = self.keys
        task_id = result.task_id
        body = encode(result)
        view: list[str] = []
        if holder is None and self.views:
            agent = _s(await self.redis.hget(k.task(task_id), "agent_id") or b"")
            if agent:
                view = [k.idem(task_id), k.for_agent(agent).idem(task_id)]
        reply = await self._finish(
            keys=[
                k.idem(task_id),
                *self._task_keys(task_id),
                k.task_waiters(task_id) if with_waiters else k.idem(task_id),
                k.processing(),
                *([self.mesh.sealed(agent_id, task_id)] if seal else view[:1]),
                *view[1:],
            ],
            args=[
                self.ttl_ms,
                self.instance_prefix,
                holder.instance_id if holder else "",
                holder.token if holder else 0,
                "1" if holder is not None and holder.fenced else "0",
                body,
                by,
                note[:500],
                agent_id,
                "1" if quiet else "0",
                *states,
            ],
        )
        status = _s(reply[0])
        if status == "ok":
            return Commit("ok", waiters=tuple(_s(w) for w in reply[1:]), body=body)
        if status == "done":
            return Commit("done", result=_result(reply[1]))
        detail = _s(reply[1]) if len(reply) > 1 else ""
        logger.warning("task_id=%s: commit %s %s by %s", task_id, status, detail, by)
        return Commit(status, detail=detail)  # type: ignore[arg-type]

    async def release(
        self, task_id: str, holder: Holder, *states: str, by: str, note: str = ""
    ) -> str:
        """Give a claim back (retry, reject) while moving to `states`; ``ok`` or why not."""
        k = self.keys
        reply = await self._release(
            keys=[k.idem(task_id), *self._task_keys(task_id), k.processing()],
            args=[self.ttl_ms, holder.instance_id, holder.token, by, note[:500], *states],
        )
        return _s(reply[0])

    async def apply_once(self, task_id: str, holder: Holder, name: str, amount: int = 1) -> int:
        """Add `amount` to the side-effect counter `name`, once per task, under the fence.

        Returns 1 (applied), 0 (this task applied it before), -1 (stale token: refused) or
        -2 (the task's record was recovered after a loss: whether it ran is unknown, refused).
        """
        k = self.keys
        return int(
            await self._apply_once(
                keys=[
                    k.idem(task_id),
                    k.effect_done(task_id, name),
                    self.mesh.side_effect(name),
                    k.task(task_id),
                ],
                args=[
                    self.ttl_ms,
                    self.instance_prefix,
                    holder.instance_id,
                    holder.token,
                    "1" if holder.fenced else "0",
                    amount,
                ],
            )
        )

    async def mark_replied(self, task_id: str) -> None:
        await self.redis.hset(self.keys.idem(task_id), "replied", "1")

    async def waiters(self, task_id: str) -> list[str]:
        """Every waiter (reply queue, maybe with a correlation_id) recorded for the task."""
        return sorted(_s(w) for w in await self.redis.smembers(self.keys.task_waiters(task_id)))

    async def seed(self, envelope: TaskEnvelope, agent_id: str, lifetime_end_ms: int) -> None:
        """Before a dispatch to `agent_id` under access control (one step): the agent joins
        the task's dispatch set (whose sealed Result may be forwarded; only routers write
        it), the task's record is created in the agent's view (where its worker claims),
        the task enters the mesh's ``processing`` set by `lifetime_end_ms` (reaper), and
        the context the task carries, when another agent saved it on the task's trace, is
        copied into the agent's view (`mesh.dispatch.context.seed_keys`)."""
        k = self.keys
        task_id = envelope.task_id
        await self._seed(
            keys=[
                k.dispatched_to(task_id),
                k.for_agent(agent_id).task(task_id),
                k.task(task_id),
                k.processing(),
                *seed_keys(k, envelope, agent_id),
            ],
            args=[self.ttl_ms, agent_id, envelope.trace_id, lifetime_end_ms, self.context_ttl_ms],
        )

    async def relay(self, task_id: str, agent_id: str, *, by: str) -> Relay:
        """A result notice for `task_id` from a worker of `agent_id`, under access control,
        in one step: believed only if a router dispatched the task to the agent and the
        agent sealed a terminal Result of this very task; the mesh's record is then
        finished from that copy (unless it ended before) and the waiters to answer come
        back with it, as stored."""
        k = self.keys
        reply = await self._relay(
            keys=[
                k.dispatched_to(task_id),
                k.idem(task_id),
                *self._task_keys(task_id),
                k.task_waiters(task_id),
                k.processing(),
            ],
            args=[
                self.ttl_ms,
                agent_id,
                task_id,
                by,
                f"from agent {agent_id}",
                self.mesh.sealed(agent_id, task_id),
            ],
        )
        return _relay_of(reply)

    async def dispatched_agents(self, task_id: str) -> set[str]:
        """Every agent a router dispatched the task to (`record_dispatch`)."""
        return {_s(a) for a in await self.redis.smembers(self.keys.dispatched_to(task_id))}

    async def sealed_result(self, agent_id: str, task_id: str) -> Result | None:
        """The Result `agent_id`'s worker committed for the task (`finish` with `seal`)."""
        raw = await self.redis.get(self.keys.sealed(agent_id, task_id))
        return None if raw is None else _result(raw)

    async def stored_result(self, task_id: str) -> Result | None:
        raw = await self.redis.hget(self.keys.idem(task_id), "result")
        return None if raw is None else _result(raw)

    async def state(self, task_id: str) -> dict[str, str]:
        """The task hash (state, trace_id, agent_id, created_ms, updated_ms); {} if unknown."""
        raw = await self.redis.hgetall(self.keys.task(task_id))
        return {_s(a): _s(b) for a, b in raw.items()}

    async def history(self, task_id: str) -> list[dict[str, Any]]:
        """Every transition of the task, oldest first (with `views`: the agents' too)."""
        rows = [
            loads(row) for row in await self.redis.lrange(self.keys.task_history(task_id), 0, -1)
        ]
        if self.views:
            for agent_id in sorted(await self.dispatched_agents(task_id)):
                view = self.keys.for_agent(agent_id)
                rows += [
                    loads(r) for r in await self.redis.lrange(view.task_history(task_id), 0, -1)
                ]
            rows.sort(key=lambda row: int(row.get("ts_ms", 0)))  # stable: the mesh's first
        return rows

    async def overdue(self, now_ms: int, limit: int = 100) -> list[str]:
        """task_ids claimed longer ago than the maximum task lifetime."""
        prefix = self.keys.task("")
        members = await self.redis.zrangebyscore(
            self.keys.processing(), 0, now_ms, start=0, num=limit
        )
        return [_s(m)[len(prefix) :] for m in members]

    async def holder_of(self, task_id: str) -> dict[str, str]:
        """The claim of a task (holder, token, claims, replied; with `views`, the claim in
        the view of the task's agent, and the mesh's own fields)."""
        raw = await self.redis.hgetall(self.keys.idem(task_id))
        found = _claim_fields(raw)
        if self.views:
            agent = _s(await self.redis.hget(self.keys.task(task_id), "agent_id") or b"")
            if agent:
                view = await self.redis.hgetall(self.keys.for_agent(agent).idem(task_id))
                claim = _claim_fields(view)
                found = {**claim, **found}
        return found


def _claim_fields(raw: dict[bytes, bytes]) -> dict[str, str]:
    """An idem hash without its Result, nor the empty holder a commit leaves."""
    return {
        _s(a): _s(b) for a, b in raw.items() if a != b"result" and not (a == b"holder" and not b)
    }


class ReplyMarks:
    """Marks tasks ``replied`` without a round trip of their own.

    The mark only spares a redelivered copy a second Result (which clients drop anyway),
    so it need not be written before the delivery is acked: it rides the next pipeline of
    claims and commits on the store's Redis client (`mesh.functions.CallBatch.ride`), or
    goes alone after `interval_s` when none went meanwhile; `close()` writes what is left.
    Every `ReplyMarks` on one Redis client shares that client's batch: a process hosting
    many agents, one runtime each, writes all their marks together.
    """

    def __init__(self, store: TaskStore, interval_s: float = 0.02) -> None:
        self.store = store
        self.interval_s = interval_s
        self._batch = CallBatch.of(store.redis)

    def mark(self, task_id: str) -> None:
        self._batch.ride(("HSET", self.store.keys.idem(task_id), "replied", "1"), self.interval_s)

    async def flush(self) -> None:
        """Write every mark that waits (this store's and the others' on its client)."""
        await self._batch.flush()

    async def close(self) -> None:
        """Write what waits now, and wait for the pipelines under way carrying marks (the
        other runtimes on the client go on marking)."""
        await self._batch.flush()


__all__ = ["Claim", "Commit", "Holder", "Relay", "ReplyMarks", "Submission", "TaskStore"]
