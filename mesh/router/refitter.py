"""`Refitter`: when and how a router refits its index's head, and installing other routers' fits.

A fit runs only when agents or memories changed since the last one (`CapabilityIndex.dirty`),
in the router's fit process (`mesh.router.fits`), within ``refit_cpu_share`` of one core
over any minute (`FitBudget`).
Once no change arrived for `SETTLE_S` (the load paused or stopped) the index gets a *full*
fit (`CapabilityIndex.fit_directions`, as `mesh calibrate` fits) at once. While changes keep
coming, a fit is due every ``refit_interval_s`` at most, and it refits the output layer alone
on the last full fit's hidden layers (`fit_outputs`, about a tenth of the cost; a full one
after a registration change or `FULL_REFIT_S`), always leaving room in the budget for the
full fit that follows the last change: the mesh is idle a few seconds after its load.

One router fits for the mesh: it announces each fit (``route.fitted``, `mesh.router.refits`)
and the others install it instead of fitting the same memories again (they apply the same
learned texts from ``route.learned``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from mesh.config import Settings
from mesh.messaging import Publisher
from mesh.outage import report as report_outage
from mesh.router.fits import Fit, FitRunner, InlineFits, fit_runner
from mesh.router.fitting import FitResult
from mesh.router.index import CapabilityIndex
from mesh.router.refits import (
    FITTED_EVENT,
    WINDOW_S,
    FitBudget,
    FitLeader,
    FitParts,
    decode_fit,
    encode_fit,
    registration_digest,
    rounded,
)
from mesh.schemas import Event

__all__ = ["FULL_REFIT_S", "SETTLE_S", "Refitter"]

logger = logging.getLogger(__name__)

#: the index is refitted once no change arrived for this long (the load paused or stopped)
SETTLE_S = 0.5
#: while memories keep changing, a full fit at least this often (else output layers only)
FULL_REFIT_S = 600.0
#: an index of at most this many agents is fitted at once by every router, unannounced
TINY = 2


class Refitter:
    """The head fits of one router's index (see the module docstring)."""

    def __init__(
        self,
        index: CapabilityIndex,
        publisher: Publisher,
        settings: Settings,
        *,
        own_id: str,
        model_id: str,
        registered: Mapping[str, object],
        runner: FitRunner | None = None,
    ) -> None:
        self.index = index
        #: where fits run (`mesh.router.fits`: this process's fit process by default)
        self.runner = runner if runner is not None else fit_runner(settings)
        #: the first fit, before the router serves, runs in a thread of the router (nothing
        #: waits on its event loop yet, and the fit process runs on idle CPU only)
        self._here = InlineFits()
        self.publisher = publisher
        self.settings = settings
        self.own_id = own_id
        self.model_id = model_id
        #: the keeper's registration signature of each agent (what a digest is taken of)
        self.registered = registered
        self.budget = FitBudget(settings.refit_cpu_share)
        self.leader = FitLeader(own_id)
        self._parts = FitParts()
        #: fits made here (full and output layers), their CPU-seconds, heads installed
        #: from another router's fit
        self.fits = 0
        self.full_fits = 0
        self.fit_cpu_s = 0.0
        self.fits_received = 0
        #: full fits given up because the load came back during them (`refit`)
        self.fits_yielded = 0
        self._closing = False
        #: the fit running now: its runner, ticket, and whether a change gives it up
        self._running: tuple[FitRunner, int, bool] | None = None
        #: monotonic time of the last change to the index
        self.changed_at = 0.0
        self._registration_changed = True
        self._last: FitResult | None = None
        self._full_at = float("-inf")
        self._next_at = 0.0
        #: the last CPU-seconds of a full fit and of an output-layer fit
        self._cost = {True: 0.0, False: 0.0}

    def close(self) -> None:
        """A full fit running now gives up at its next step (the router is stopping)."""
        self._closing = True
        if self._running is not None:
            runner, ticket, _ = self._running
            runner.interrupt(ticket)

    def changed(self, *, registration: bool = False) -> None:
        """The index took a change (a registration: the next fit is a full one); a fit of
        the settled index running now gives way (`refit`)."""
        self.changed_at = time.monotonic()
        if registration:
            self._registration_changed = True
        if self._running is not None and self._running[2]:
            runner, ticket, _ = self._running
            runner.interrupt(ticket)

    def plan(self, now: float) -> bool | None:
        """The fit due here and now: True a full one, False the output layer, None none."""
        if not self.index.dirty:
            return None
        if len(self.index) <= TINY:
            return True  # a fit of two agents costs little; routing waits for it
        if not self.leader.fits_here(now):
            return None  # another router fits for the mesh: its head will arrive
        full, outputs = self._cost[True], self._cost[False]
        can_refine = self._last is not None and self._last.head is not None
        if now - self.changed_at >= SETTLE_S:
            if self.budget.allows(now, full):
                return True
            return False if can_refine and self.budget.allows(now, outputs) else None
        if now < self._next_at:
            return None
        if not can_refine or self._registration_changed or now - self._full_at >= FULL_REFIT_S:
            return True if self.budget.allows(now, full) else None
        return False if self.budget.allows(now, outputs + full) else None

    async def refit(self, full: bool = True, *, here: bool = False) -> float:
        """Fit (`full`, else the output layer) through the runner (`here`: in a worker
        thread of the router, for the fit before it serves), install and announce; returns
        the fit's CPU-seconds (the fit process's, or the worker thread's).

        A full fit that began because the index settled, when nothing else asks for it (a
        head exists and no registration changed), gives way to the load: a change during
        it gives it up (`changed`), its CPU counted in the budget, and the changes are
        fitted as under load until the index settles again. Any full fit gives up once
        `close` was called.
        """
        started = time.monotonic()
        previous = self._last
        full = full or previous is None or previous.head is None
        ids = self.index.ids
        settle = (
            full
            and previous is not None
            and previous.head is not None
            and not self._registration_changed
            and started - self.changed_at >= SETTLE_S
            and len(ids) > TINY
        )
        self._next_at = started + self.settings.refit_interval_s
        if full:
            self._registration_changed = False
        dirty_from = time.monotonic()
        self.index.dirty = False  # a change during the fit sets it again
        if self._closing:
            self.index.dirty = True
            return 0.0
        runner = self._here if here else self.runner
        ticket = runner.ticket()
        self._running = (runner, ticket, settle)
        refine = None if full else previous

        def fit() -> Fit:
            # the snapshot too is taken off the event loop (10,000 agents' arrays)
            return runner.run(self.index.fit_job(refine), ticket)

        try:
            result, cpu_s = await asyncio.to_thread(fit)
        except BaseException:
            self.index.dirty = True
            raise
        finally:
            self._running = None
        if result is None:
            self.index.dirty = True
            if self._closing:
                return cpu_s
            self.fits_yielded += 1
            self.fit_cpu_s += cpu_s
            self.budget.record(time.monotonic(), cpu_s)
            logger.debug("full refit given up after %.2f CPU-s: the load is back", cpu_s)
            return cpu_s
        result = rounded(result)  # the head as the other routers install it
        self.index.apply_fit(result)
        self.index.dirty = self.changed_at >= dirty_from
        self._last = result
        if full:
            self._full_at = started
            self.full_fits += 1
        self._cost[full] = cpu_s
        self.fits += 1
        self.fit_cpu_s += cpu_s
        self.budget.record(time.monotonic(), cpu_s)
        logger.debug(
            "%s refit of %d agents in %.2f CPU-s", "full" if full else "output", len(ids), cpu_s
        )
        if len(ids) <= TINY:
            return cpu_s  # every router fits a tiny index itself, at once
        lease_s = 2 * (WINDOW_S + time.monotonic() - started)
        try:
            for event in self._events(result, lease_s, full):
                await self.publisher.emit(event)
        except Exception as exc:
            if not report_outage(exc, what="announcing a fit"):
                logger.warning("announcing a fit failed; the other routers fit", exc_info=True)
        return cpu_s

    def _events(self, result: FitResult, lease_s: float, full: bool) -> list[Event]:
        """``route.fitted``: `result` for the other routers, who defer for `lease_s`."""
        digests: dict[str, str | None] = {}
        for agent_id, registered in result.agents.items():
            signature = self.registered.get(agent_id)
            current = agent_id in self.index and self.index.entry(agent_id).registered
            fresh = signature is not None and current == registered
            digests[agent_id] = registration_digest(signature) if fresh else None
        header = {"model": self.model_id, "from": self.own_id, "lease_s": lease_s, "full": full}
        return [
            Event(type=FITTED_EVENT, data={**header, **part})
            for part in encode_fit(result, digests)
        ]

    def take(self, event: Event) -> None:
        """Install another router's fit once all its parts arrived; when this router
        defers to the sender, its memories count as fitted (the fitter applies the same
        learned texts)."""
        data: dict[str, Any] = event.data
        sender = str(data.get("from"))
        if sender == self.own_id or data.get("model") != self.model_id:
            return
        whole = self._parts.add(sender, data)
        if whole is None:
            return
        local = {
            agent_id: (registration_digest(signature), self.index.entry(agent_id).registered)
            for agent_id, signature in self.registered.items()
            if agent_id in self.index
        }
        result = decode_fit(whole, -1, local)
        if result.capability_mean.shape != (self.index.dim,):
            return
        self.index.apply_fit(result)
        now = time.monotonic()
        self._last = result
        if whole.get("full"):
            self._full_at = now
            self._registration_changed = False
        self.leader.heard(sender, now, float(data.get("lease_s", 0.0)))
        if not self.leader.fits_here(now):
            # the sender fits for the mesh: a change it had not yet applied when it began
            # reached it too, and its next fit covers it. A fit from a router that defers
            # to this one covers nothing here (it may have begun before this router's
            # last change): this router goes on fitting its own changes.
            self.index.dirty = False
        self.fits_received += 1
