"""`RedisHealth`: how a background loop tells that Redis failed it, and that it came back.

A loop that must outlive any Redis trouble (the registry's heartbeat flush and sweep, the
router's reaper) catches `mesh.retrying.REDIS_FAILURES` around each round and reports it
here: one WARNING when the first call fails (with the error), nothing more while it keeps
failing, one INFO when a call succeeds again (with how long it was down). `healthy`,
`failures` and `outages` are the health signal others read (tests, ``stats``, metrics).
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger(__name__)


class RedisHealth:
    """The Redis health of one component's loops (one per component, shared by its loops)."""

    def __init__(self, component: str) -> None:
        self.component = component
        #: False from the first failed call until the next call that succeeds
        self.healthy = True
        #: failed calls, and outages (runs of failed calls), since start
        self.failures = 0
        self.outages = 0
        #: `time.monotonic()` of the first failure of the current outage
        self.down_since: float | None = None
        self.last_error = ""

    def failed(self, what: str, exc: BaseException) -> None:
        """A Redis call of `what` (a loop's name) failed with `exc`; the loop retries."""
        self.failures += 1
        self.last_error = repr(exc)[:300]
        if not self.healthy:
            return
        self.healthy = False
        self.outages += 1
        self.down_since = time.monotonic()
        logger.warning(
            "%s: Redis failed in %s (%s); retrying until it answers",
            self.component,
            what,
            self.last_error,
        )

    def ok(self) -> None:
        """A Redis call succeeded: an outage in progress is over."""
        if self.healthy:
            return
        down_s = time.monotonic() - (self.down_since or time.monotonic())
        self.healthy = True
        self.down_since = None
        logger.info(
            "%s: Redis answers again after %.1fs (%d failed calls so far)",
            self.component,
            down_s,
            self.failures,
        )


__all__ = ["RedisHealth"]
