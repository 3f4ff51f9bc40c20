"""`Observer`: the process behind `mesh observer` (docs/design.md section 8).

Each event of its feed is, in this order: checked (`EventTrust`: under access control
only the role entitled to an event is believed), stored under its trace in Redis, written
to the JSON-lines logs, counted in the per-agent figures and run through the alert rules;
an alert transition is logged (process log and ``alerts.jsonl``) and published as an
``alert.<kind>`` event. A timer ends conditions that time alone ends and stores the
figures for `mesh stats`; another reads the management API for the queue rules.

Degrades rather than stops: a Redis user that may not write (an observer role is read-only
in Redis today) turns the trace store and the figures off, logged once with the fix; an
observer role, which may not publish on the events exchange, logs its alerts without
publishing them; an unreachable management API pauses the queue rules.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import NoPermissionError

from mesh.access.roles import vhost_of
from mesh.access.trust import EventTrust
from mesh.connection import MeshConnection
from mesh.errors import MeshError
from mesh.lifecycle import Lifecycle
from mesh.management import Management
from mesh.messaging import Publisher
from mesh.metrics import Metrics, QueueDepthCollector
from mesh.observer.alerts import Alert, AlertRules, QueueWatch, Thresholds
from mesh.observer.feed import EventFeed
from mesh.observer.figures import Figures
from mesh.observer.journal import Journal
from mesh.observer.store import TraceStore
from mesh.retrying import TRANSIENT_ERRORS
from mesh.schemas import Event, new_id, now_ms
from mesh.schemas.codec import dumps

logger = logging.getLogger(__name__)

#: how often windows are re-judged and the figures stored for `mesh stats`
TICK_S = 1.0
#: the stored figures outlive this many ticks, then `mesh stats` says no observer runs
FIGURES_TTL_TICKS = 5


class Observer(Lifecycle):
    """One observer: `await start()`, then it follows the events until `await close()`."""

    def __init__(self, conn: MeshConnection, *, metrics: Metrics | None = None) -> None:
        self.conn = conn
        self.metrics = metrics
        settings = conn.settings
        self.settings = settings
        self.observer_id = f"observer-{new_id()[:8]}"
        self.trust = EventTrust(settings)
        self.traces = TraceStore(conn.redis, conn.keys, settings)
        self.journal = Journal.from_settings(settings)
        self.figures = Figures(settings)
        self.rules = AlertRules(
            Thresholds.from_settings(settings),
            QueueWatch.from_topology(conn.topology, access_control=settings.access_control),
        )
        self.publisher = Publisher(conn)
        self.feed = EventFeed(conn, self.observe)
        self._management: Management | None = None
        #: why Redis writes are off (a read-only Redis user), else None
        self.redis_off: str | None = None
        self.events = 0
        self._tasks: list[asyncio.Task[None]] = []
        self._management_down = False

    @property
    def queue_name(self) -> str:
        return self.feed.queue_name

    @property
    def alerts(self) -> list[Alert]:
        """The conditions that hold now."""
        return list(self.rules.book.active.values())

    async def start(self) -> None:
        if self._tasks:
            return
        self.journal.start()
        self._management = Management(self.settings, vhost_of(self.settings))
        await self.publisher.start()
        await self.feed.start()
        if self.metrics is not None:  # queue depths for Prometheus, read at scrape time
            self.metrics.registry.register(
                QueueDepthCollector(self._management, self.conn.topology)
            )
        self._tasks = [
            asyncio.create_task(self._every(TICK_S, self._tick)),
            asyncio.create_task(
                self._every(self.settings.observer_check_interval_s, self.check_queues)
            ),
        ]
        logger.info(
            "observer %s consuming %s (namespace %s)",
            self.observer_id,
            self.queue_name,
            self.settings.namespace,
        )

    async def close(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.feed.close()
        await self.publisher.close()
        self.journal.close()

    # --- per event -------------------------------------------------------------------------
    async def observe(self, event: Event, raw: bytes, user_id: str | None) -> None:
        """Take in one event (the feed calls this; tests may too)."""
        if not self.trust.believes(user_id, event):
            logger.debug("event %s from user %r not believed", event.type, user_id)
            return
        self.events += 1
        if event.trace_id and self.redis_off is None:
            await self._redis_write(self.traces.add([(event, raw)]))
        self.journal.event(event, user_id)
        self.figures.observe(event)
        for alert in self.rules.on_event(event):
            await self.announce(alert)

    async def announce(self, alert: Alert) -> None:
        """Log an alert transition and publish it (unless a worker's, or not allowed)."""
        self.journal.alert(alert)
        if alert.state == "raised":
            logger.warning("alert %s raised (%s): %s", alert.kind, alert.source, alert.message)
        else:
            logger.info("alert %s cleared: %s", alert.kind, alert.message)
        if alert.published:
            try:
                await self.publisher.emit(alert.event(self.observer_id))
            except TRANSIENT_ERRORS as exc:
                if not self.conn.outages.report(exc, what=f"alert {alert.key}"):
                    logger.warning("alert %s not published (outage)", alert.key, exc_info=True)

    # --- timers ----------------------------------------------------------------------------
    async def _every(self, interval_s: float, action: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await action()
            except TRANSIENT_ERRORS as exc:
                if not self.conn.outages.report(exc, what="the observer's timer"):
                    logger.info("observer timer: outage, next round in %.1fs", interval_s)

    async def _tick(self) -> None:
        for alert in self.rules.tick(now_ms()):
            await self.announce(alert)
        if self.redis_off is None:
            await self._redis_write(self.store_figures())

    async def store_figures(self) -> None:
        """Put the current `snapshot` where `mesh stats` reads it (short TTL)."""
        ttl_ms = int(TICK_S * FIGURES_TTL_TICKS * 1000)
        key = self.conn.keys.observer_figures(self.settings.observer_name)
        await self.conn.redis.set(key, dumps(self.snapshot()), px=ttl_ms)

    async def check_queues(self) -> None:
        """Read the namespace's queues from the management API; run the queue rules."""
        if self._management is None:
            return
        try:
            rows = await asyncio.to_thread(self._management.queues)
        except MeshError as exc:
            if not self._management_down:
                logger.warning("observer: queue checks paused (%s)", exc)
            self._management_down = True
            return
        if self._management_down:
            logger.info("observer: queue checks resumed")
        self._management_down = False
        prefix = f"{self.settings.namespace}."
        mine = [r for r in rows if str(r.get("name", "")).startswith(prefix)]
        for alert in self.rules.on_queues(mine, now_ms()):
            await self.announce(alert)

    async def _redis_write(self, write: Awaitable[None]) -> None:
        try:
            await write
            self.conn.outages.redis.back()
        except NoPermissionError as exc:
            self.redis_off = str(exc)
            logger.error(
                "observer %s: Redis refused a write (%s): traces and figures are off; give "
                "its Redis user write access to the %s:trace:* and %s:observer-figures:* "
                "keys, then restart it",
                self.observer_id,
                exc,
                self.settings.namespace,
                self.settings.namespace,
            )

    def snapshot(self) -> dict[str, Any]:
        """Figures, active alerts and the observer's own counters (JSON-ready)."""
        return {
            "observer_id": self.observer_id,
            "name": self.settings.observer_name,
            "namespace": self.settings.namespace,
            "queue": self.queue_name,
            "ts_ms": now_ms(),
            "ignored": self.trust.ignored,
            **self.figures.snapshot(),
            "alerts": [a.as_dict() for a in self.alerts],
        }


__all__ = ["Observer"]
