"""The orphan reaper: nothing stays ``processing`` past the maximum task lifetime.

Workers cancel handlers at min(deadline, `max_task_lifetime_s`) themselves; the reaper
catches what no worker will finish: a task whose claim outlived the lifetime while its
holder's lease is gone (the process died and the message was lost with it), or that is
past the lifetime by more than a lease (a worker stuck beyond cancellation). It fails such
a task with ``lifetime_exceeded`` and answers every caller. Routers run it; several
reapers at once are harmless (the terminal commit is atomic and happens once).
"""

from __future__ import annotations

import asyncio
import logging

from mesh.dispatch.events import emit_states
from mesh.dispatch.store import TaskStore
from mesh.messaging import Publisher
from mesh.redis_health import RedisHealth
from mesh.retrying import REDIS_FAILURES, TRANSIENT_ERRORS, with_retries
from mesh.schemas import ErrorInfo, Result, now_ms
from mesh.tasks import raise_if_cancelling

logger = logging.getLogger(__name__)


class Reaper:
    """Fails orphaned tasks; ``await sweep()`` once, or ``run()`` as a background task."""

    def __init__(self, store: TaskStore, publisher: Publisher, lease_ttl_s: float) -> None:
        self.store = store
        self.publisher = publisher
        self.lease_ttl_ms = int(lease_ttl_s * 1000)
        self.reaped = 0
        #: whether the sweeps reach Redis (the health signal)
        self.redis_health = RedisHealth("reaper", publisher.conn.outages.redis)

    async def sweep(self) -> list[str]:
        """Fail every overdue task whose holder is gone; returns their task_ids."""
        now = now_ms()
        done = []
        for task_id in await self.store.overdue(now):
            claim = await self.store.holder_of(task_id)
            alive = await self._holder_alive(claim)
            overdue_ms = now - int(claim.get("claimed_ms", now))
            if alive and overdue_ms < self.lease_ttl_ms:
                continue
            state = await self.store.state(task_id)
            result = Result(
                task_id=task_id,
                trace_id=state.get("trace_id") or None,
                status="failed",
                agent_id=state.get("agent_id") or None,
                error=ErrorInfo(
                    code="lifetime_exceeded",
                    message="the task outlived the maximum task lifetime with no live worker",
                    details={"holder": claim.get("holder"), "state": state.get("state")},
                ),
            )
            commit = await self.store.finish(result, "failed", by="reaper", note="orphan")
            if commit.status != "ok":
                continue
            for reply_to in commit.waiters:
                await self._reply(reply_to, result)
            await emit_states(
                self.publisher,
                ("failed",),
                task_id=task_id,
                trace_id=result.trace_id,
                data={"code": "lifetime_exceeded"},
            )
            logger.warning("reaped orphan task_id=%s holder=%s", task_id, claim.get("holder"))
            done.append(task_id)
        self.reaped += len(done)
        return done

    async def _reply(self, reply_to: str, result: Result) -> None:
        await with_retries(lambda: self.publisher.reply(reply_to, result))

    async def _holder_alive(self, claim: dict[str, str]) -> bool:
        holder = claim.get("holder")
        if not holder or claim.get("fenced") != "1":
            return False
        keys = self.store.keys
        raw = await self.store.redis.hmget(
            keys.instance(holder), "token", "status", "lease_expires_ms"
        )
        token, status, expires = (v.decode() if v is not None else None for v in raw)
        return (
            token == claim.get("token")
            and status == "up"
            and (expires is None or int(expires) >= now_ms())
        )

    async def run(self, interval_s: float) -> None:
        """Sweep every `interval_s` until cancelled; any failure only skips a round (a
        Redis one is logged once per outage, `redis_health`)."""
        while True:
            try:
                await self.sweep()
                self.redis_health.ok()
            except REDIS_FAILURES as exc:
                self.redis_health.failed("sweep", exc)
            except TRANSIENT_ERRORS as exc:  # an answer or event the broker did not take
                if not self.publisher.conn.outages.report(exc, what="the reaper's sweep"):
                    logger.warning("reaper sweep skipped (transient failure)", exc_info=True)
            except Exception:  # a bug must not stop the reaper: logged, next round
                logger.exception("reaper sweep failed")
            raise_if_cancelling()
            await asyncio.sleep(interval_s)


__all__ = ["Reaper"]
