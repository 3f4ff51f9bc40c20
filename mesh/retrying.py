"""Transient failures and how long to keep trying through them (tenacity policies).

`TRANSIENT_ERRORS` is the one tuple of errors worth another try: the broker or Redis went
away for a moment (a restart, a network blip). aio-pika's robust connection reconnects and
restores channels on its own; these policies keep a publish or a reply alive meanwhile,
logging each attempt.

The worker uses the same tuple for errors a handler raises: one of them (or `mesh.Retry`)
sends the task through `mesh.retry.<delay>`; any other exception is a failed Result. The
builtins in it (``ConnectionError``, ``TimeoutError``, ``OSError``) cover what handler code
usually raises when a backend of its own is away.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import aio_pika.exceptions
import aiormq.exceptions
import redis.exceptions
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from mesh.errors import RedisFunctionsMissing
from mesh.outage import report as report_outage
from mesh.redis_pool import RedisBusy

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: errors caused by a broker or Redis outage, not by the message: retry them
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    aio_pika.exceptions.AMQPConnectionError,
    aio_pika.exceptions.ChannelClosed,
    aiormq.exceptions.ChannelInvalidStateError,
    # BusyLoadingError (LOADING: a restarted Redis reads its data) is one of these
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    # BUSY: a script or function runs (`mesh.redis_pool.RedisBusy`)
    RedisBusy,
    ConnectionError,
    asyncio.TimeoutError,
    OSError,
)

#: every error a Redis call ends in, transient or not (away, BUSY, a refused command, OOM
#: under ``noeviction``, a missing function library): what a background loop that must
#: outlive any Redis trouble catches, reports (`mesh.redis_health`) and retries
REDIS_FAILURES: tuple[type[BaseException], ...] = (
    redis.exceptions.RedisError,
    RedisFunctionsMissing,
)

#: how long a publish keeps trying through an outage before it gives up
PUBLISH_RETRY_S = 60.0


def _log_attempt(state: RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    what = getattr(state.fn, "__qualname__", "operation")
    if exc is not None and report_outage(exc, what=what):
        # a lost broker or Redis: said once per outage (`mesh.outage`), each attempt here
        logger.debug("%s failed (attempt %d): %r; retrying", what, state.attempt_number, exc)
        return
    logger.warning(
        "%s failed (attempt %d, %.1fs so far): %r; retrying",
        getattr(state.fn, "__qualname__", "operation"),
        state.attempt_number,
        state.seconds_since_start,
        exc,
    )


def policy(max_delay_s: float = PUBLISH_RETRY_S) -> AsyncRetrying:
    """Retry `TRANSIENT_ERRORS` with capped exponential backoff for `max_delay_s`."""
    return AsyncRetrying(
        retry=retry_if_exception_type(TRANSIENT_ERRORS),
        wait=wait_exponential(multiplier=0.05, max=2.0),
        stop=stop_after_delay(max_delay_s),
        before_sleep=_log_attempt,
        reraise=True,
    )


async def with_retries(fn: Callable[[], Awaitable[T]], max_delay_s: float = PUBLISH_RETRY_S) -> T:
    """Run `fn` under `policy(max_delay_s)`; the last error is raised when time runs out.

    The first try runs bare: nearly every call succeeds at once, and building the policy
    costs more than a publish's own Python (about 15 us). After a transient failure the
    policy tries again at once, then backs off, for `max_delay_s` from then on."""
    try:
        return await fn()
    except TRANSIENT_ERRORS:
        pass
    async for attempt in policy(max_delay_s):
        with attempt:
            return await fn()
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover


async def quietly(action: Awaitable[object]) -> bool:
    """Await an ack or nack; False when its channel was lost (the broker then redelivers)."""
    try:
        await action
    except TRANSIENT_ERRORS as exc:
        level = logging.DEBUG if report_outage(exc, what="acks") else logging.INFO
        logger.log(level, "ack/nack on a lost channel skipped; the broker redelivers the message")
        return False
    return True


__all__ = [
    "PUBLISH_RETRY_S",
    "REDIS_FAILURES",
    "TRANSIENT_ERRORS",
    "policy",
    "quietly",
    "with_retries",
]
