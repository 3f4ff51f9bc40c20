"""`RedisHealth`: how a background loop tells that Redis failed it, and that it came back.

A loop that must outlive any Redis trouble (the registry's heartbeat flush and sweep, the
router's reaper) catches `mesh.retrying.REDIS_FAILURES` around each round and reports it
here. `healthy`, `failures` and `outages` are this component's health signal (tests,
``stats``, metrics); what is logged is the process's one `mesh.outage.OutageLog` of that
Redis, shared with every other loop: one WARNING when an outage starts (the URL masked,
the error, that it retries), nothing more while it lasts, one INFO with its length when a
call succeeds again, and a flapping Redis said at most once a minute.
"""

from __future__ import annotations

import time

from mesh.outage import OutageLog, describe


class RedisHealth:
    """The Redis health of one component's loops (one per component, shared by its loops)."""

    def __init__(self, component: str, outage: OutageLog) -> None:
        self.component = component
        #: the process's log of that Redis (what is said, once per outage)
        self.outage = outage
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
        self.last_error = describe(exc)
        self.outage.lost(exc, what=f"{self.component}'s {what}")
        if not self.healthy:
            return
        self.healthy = False
        self.outages += 1
        self.down_since = time.monotonic()

    def ok(self) -> None:
        """A Redis call succeeded: an outage in progress is over."""
        self.outage.back()
        if self.healthy:
            return
        self.healthy = True
        self.down_since = None


__all__ = ["RedisHealth"]
