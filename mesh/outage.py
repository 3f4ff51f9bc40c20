"""`OutageLog`: what a process says when the broker or Redis goes away, and when it is back.

Every loop of a process that touches RabbitMQ or Redis (the registry's sweep and flush, a
router's loops, a worker's heartbeats, the observer, a client, the robust connection
itself) reports a failed call here instead of logging it: the first failure of an outage
is one WARNING (what, where -- the URL masked -- the error, and that the mesh retries),
the rest of the outage says nothing, and the first call that succeeds afterwards is one
INFO with the outage's length. One `OutageLog` per dependency per process
(`outage_log(service, where)`), shared by all the loops of that process, so four loops
failing on one Redis make one line, not four.

A dependency that flaps does not flood either: a cause (a dependency and the kind of
error) is said at most once per `REPEAT_S`; outages inside that minute are counted and
the next WARNING says how many were not logged (`RateLimitedLog`).

`connection_failure(exc)` tells which dependency an error is the loss of (``"RabbitMQ"``,
``"Redis"`` or None): expected connection errors are reported, never logged with a
traceback; anything else is a bug and the caller logs it as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from types import TracebackType
from typing import Literal

import aio_pika.exceptions
import aiormq.exceptions
import redis.exceptions

from mesh.redact import redact

logger = logging.getLogger(__name__)

#: at most one WARNING per cause in this many seconds (repeats are counted)
REPEAT_S = 60.0

Service = Literal["RabbitMQ", "Redis"]

#: errors that say the broker connection (or a channel on it) is gone
BROKER_LOST: tuple[type[BaseException], ...] = (
    aiormq.exceptions.AMQPConnectionError,
    aiormq.exceptions.ChannelInvalidStateError,
    aio_pika.exceptions.AMQPConnectionError,
)
#: errors that say Redis does not answer (away, a timeout, LOADING after a restart)
REDIS_LOST: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
)
#: builtins a lost socket ends in; whose socket it was is read from the traceback
_SOCKET_ERRORS: tuple[type[BaseException], ...] = (OSError, asyncio.TimeoutError)
_PACKAGES: dict[str, Service] = {"aiormq": "RabbitMQ", "aio_pika": "RabbitMQ", "redis": "Redis"}


def _frames_service(tb: TracebackType | None) -> Service | None:
    """The dependency whose client code raised (the innermost redis/aiormq frame)."""
    found: Service | None = None
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        service = _PACKAGES.get(module.partition(".")[0])
        if service is not None:
            found = service
        tb = tb.tb_next
    return found


def connection_failure(exc: BaseException) -> Service | None:
    """Which dependency `exc` is the loss of: ``"RabbitMQ"``, ``"Redis"``, or None (not a
    connection error: a bug, a refused command, a full queue...)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, REDIS_LOST):
            return "Redis"
        if isinstance(current, BROKER_LOST):
            return "RabbitMQ"
        if isinstance(current, _SOCKET_ERRORS):
            service = _frames_service(current.__traceback__)
            if service is not None:
                return service
        current = current.__cause__ or current.__context__
    return None


def describe(exc: BaseException | None) -> str:
    """An error in a few words, secrets redacted (``ConnectionError: Error 111 ...``)."""
    if exc is None:
        return "connection closed"
    text = redact(str(exc).strip())[:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class RateLimitedLog:
    """A logger that says each cause at most once per `every_s`; what it held back is
    counted and the next line of that cause says so."""

    def __init__(
        self,
        log: logging.Logger,
        every_s: float = REPEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.log = log
        self.every_s = every_s
        self.clock = clock
        self._last: dict[str, float] = {}
        #: lines held back per cause since its last line
        self.suppressed: dict[str, int] = {}

    def may_say(self, cause: str) -> bool:
        """True (and the cause's minute starts) when `cause` may be logged now."""
        now = self.clock()
        last = self._last.get(cause)
        if last is not None and now - last < self.every_s:
            self.suppressed[cause] = self.suppressed.get(cause, 0) + 1
            return False
        self._last[cause] = now
        return True

    def held_back(self, cause: str) -> int:
        """How many lines of `cause` were held back since its last line (and reset)."""
        return self.suppressed.pop(cause, 0)

    def reset(self) -> None:
        """Forget every cause's minute (the next line of each is said)."""
        self._last.clear()
        self.suppressed.clear()

    def log_cause(self, level: int, cause: str, message: str, *args: object) -> bool:
        """Log `message` unless `cause` spoke within `every_s`; True when it was logged."""
        if not self.may_say(cause):
            return False
        held = self.held_back(cause)
        if held:
            message += " (%d more in the last %.0fs not logged)"
            args = (*args, held, self.every_s)
        self.log.log(level, message, *args)
        return True


class OutageLog:
    """The outages of one dependency (`service` at `where`) as this process sees them.

    `lost(exc)` when a call failed because it is away, `back()` when a call succeeded.
    `healthy`, `failures` and `outages` are the health signal tests and metrics read.
    """

    def __init__(
        self,
        service: Service,
        where: str,
        *,
        retry: str = "retrying",
        every_s: float = REPEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.service = service
        #: the masked URL (or sentinel list) of the dependency
        self.where = where
        #: how the process retries, for the WARNING (``retrying every 1s``)
        self.retry = retry
        self.clock = clock
        self.limiter = RateLimitedLog(logger, every_s, clock)
        self.healthy = True
        self.failures = 0
        self.outages = 0
        self.down_since: float | None = None
        self.last_error = ""
        self._said_lost = False

    def lost(self, exc: BaseException | None = None, *, what: str = "") -> None:
        """A call (of `what`: a loop's name) failed because the dependency is away."""
        self.failures += 1
        self.last_error = describe(exc)
        if not self.healthy:
            return
        self.healthy = False
        self.outages += 1
        self.down_since = self.clock()
        # a refused command (OOM, BUSY, a missing function) is a cause of its own
        away = exc is None or connection_failure(exc) is not None
        cause = "lost" if away else type(exc).__name__
        self._said_lost = self.limiter.log_cause(
            logging.WARNING,
            cause,
            "%s at %s %s%s (%s); %s until it answers",
            self.service,
            self.where,
            "lost" if away else "failing",
            f" in {what}" if what else "",
            self.last_error,
            self.retry,
        )

    def back(self) -> None:
        """A call succeeded: an outage in progress is over (one INFO, with its length)."""
        if self.healthy:
            return
        down_s = self.clock() - (self.down_since or self.clock())
        self.healthy = True
        self.down_since = None
        level = logging.INFO if self._said_lost else logging.DEBUG
        logger.log(
            level,
            "%s at %s is back after %.1fs (%d failed calls)",
            self.service,
            self.where,
            down_s,
            self.failures,
        )

    def report(self, exc: BaseException, *, what: str = "") -> bool:
        """`lost(exc)` when `exc` is this dependency's loss; True when it was."""
        if connection_failure(exc) != self.service:
            return False
        self.lost(exc, what=what)
        return True

    def __repr__(self) -> str:
        state = "up" if self.healthy else "down"
        return f"OutageLog({self.service} at {self.where}: {state}, {self.outages} outages)"


_LOGS: dict[tuple[str, str], OutageLog] = {}
_LOCK = threading.Lock()


def outage_log(service: Service, where: str, *, retry: str = "retrying") -> OutageLog:
    """The process's one `OutageLog` of `service` at `where` (made on first use)."""
    with _LOCK:
        found = _LOGS.get((service, where))
        if found is None:
            found = _LOGS[(service, where)] = OutageLog(service, where, retry=retry)
        return found


def report(exc: BaseException, *, what: str = "") -> bool:
    """`Outages.report` for a loop that holds no connection (only a Redis client): `exc`
    goes to the process's `OutageLog` of its dependency (each of them, should the process
    use several URLs); False when it is no connection error or nothing is connected."""
    service = connection_failure(exc)
    with _LOCK:
        logs = [log for (name, _), log in _LOGS.items() if name == service]
    for log in logs:
        log.lost(exc, what=what)
    return bool(logs)


class Outages:
    """A process's broker and Redis `OutageLog`s, and which of them an error belongs to."""

    def __init__(self, broker: OutageLog, redis: OutageLog) -> None:
        self.broker = broker
        self.redis = redis

    def report(self, exc: BaseException, *, what: str = "") -> bool:
        """Report `exc` to the dependency it is the loss of; False when it is no
        connection error (the caller logs it: a bug, a refused command)."""
        service = connection_failure(exc)
        if service is None:
            return False
        (self.broker if service == "RabbitMQ" else self.redis).lost(exc, what=what)
        return True


__all__ = [
    "BROKER_LOST",
    "REDIS_LOST",
    "REPEAT_S",
    "OutageLog",
    "Outages",
    "RateLimitedLog",
    "connection_failure",
    "describe",
    "outage_log",
    "report",
]
