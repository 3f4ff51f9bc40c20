"""`IndexKeeper`: keeps a router's `CapabilityIndex` in step with the mesh, off the hot path.

- Registry changes (the `AgentSnapshot`'s hooks): an agent's registration is embedded
  (through the shared Redis vector cache) and added or replaced; a lapsed agent stops being
  routable; loads and liveness are copied from the snapshot every `STATS_REFRESH_S`.
- Outcomes (``task.*`` events): counts and breakers (`OutcomeLedger`); the records of this
  router's own dispatches are written in batches (`OutcomeLedger.flush`).
- Learning is incremental: a text Redis sampled into reservoir slot *s* replaces slot *s*
  in the index (its own grams and one row, `CapabilityIndex.learn_at`), and the router that
  learned it announces it with its vector (``route.learned``), so the other routers apply
  the same slot without a Redis read or an embedding. A memory is read whole only when an
  agent joins and after counted feedback.
- Head refits (`Refitter`) run in the router's fit process (`mesh.router.fits`), never on
  the event loop nor under its GIL, beside the upkeep (which goes on meanwhile), only when
  agents or memories changed, within ``refit_cpu_share`` of one core over any minute; a fit
  of the settled index gives way when the load comes back; one router fits for the mesh and
  the others install its head (``route.fitted``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.access.trust import EventTrust
from mesh.connection import MeshConnection, process_queue_id
from mesh.messaging import Publisher
from mesh.registry.snapshot import AgentSnapshot
from mesh.registry.state import AgentState
from mesh.router.embedding import Embedder, cached_vectors
from mesh.router.index import AgentStats, CapabilityIndex
from mesh.router.memory import ExampleMemory
from mesh.router.outcomes import (
    COUNTS_EVENT,
    LEARNED_EVENT,
    LEARNING_EVENTS,
    Learned,
    OutcomeLedger,
    own_outcomes,
)
from mesh.router.refits import FITTED_EVENT
from mesh.router.refitter import SETTLE_S, Refitter
from mesh.router.stats import UnheardDispatches
from mesh.router.vectors import VectorCache
from mesh.schemas import Event, now_ms
from mesh.tasks import raise_if_cancelling
from mesh.wire import NoAck, Subscriber, each_event

logger = logging.getLogger(__name__)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


#: how often loads and liveness are copied from the snapshot into the index
STATS_REFRESH_S = 1.0
#: how often queued routing records and outcomes are written (one pipeline each time),
#: however many outcome messages came in between
FLUSH_INTERVAL_S = 0.2
#: how often this router's outcome counts go to the other routers (one ``route.counts``)
COUNTS_INTERVAL_S = 0.5
#: a router that starts while agents register (one registered within this long) takes them
#: in until registrations pause this long, then makes its first fit: one fit of all of
#: them, instead of one of the first few now and a full one of all again under the load
ARRIVALS_QUIET_S = 1.0
#: ... waiting at most this long (agents that keep arriving are fitted as usual)
ARRIVALS_WAIT_S = 5.0


class IndexKeeper:
    """The background upkeep of one router's index. ``await start()`` / ``await close()``."""

    def __init__(
        self,
        conn: MeshConnection,
        embedder: Embedder,
        snapshot: AgentSnapshot,
        index: CapabilityIndex,
        ledger: OutcomeLedger,
        publisher: Publisher,
    ) -> None:
        self.conn = conn
        self.settings = conn.settings
        self.embedder = embedder
        self.snapshot = snapshot
        self.index = index
        self.ledger = ledger
        self.publisher = publisher
        self.keeper_id = process_queue_id()
        self.vectors = VectorCache(conn.redis, conn.keys, embedder)
        self.memory: ExampleMemory = ledger.memory
        self._registered: dict[str, Any] = {}
        #: this router's dispatches no heartbeat has counted yet: added to the agents' loads
        self._unheard = UnheardDispatches()
        self._dirty_agents: set[str] = set()
        #: agents whose outcome counts changed since their stats were last refreshed
        self._stats_due: set[str] = set()
        #: agents whose memory must be read whole (joined, or counted feedback)
        self._memory_dirty: set[str] = set()
        self._wake = asyncio.Event()
        #: when records were last written and counts last announced, and when the loop's
        #: sleep ends (monotonic)
        self._last_flush = self._last_counts = float("-inf")
        self._wake_at = float("inf")
        #: set whenever the index took in a registry change
        self.synced = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        #: the head fit running beside the loop (None: none)
        self._fit_task: asyncio.Task[None] | None = None
        self.subscriber = Subscriber(
            conn,
            self._declare,
            each_event(self._on_event),
            NoAck("learning events"),
            prefetch=1_000,
        )
        #: under access control, outcomes count only from a router or the agent's own user
        self.trust = EventTrust(conn.settings)
        #: texts learned from this router / from others
        self.learned_here = 0
        self.learned_elsewhere = 0
        #: ``route.learned`` items no routing record vouched for (access control)
        self.learned_refused = 0
        #: outcome events this router took in (its own dispatches' and untagged ones), and
        #: other routers' ``route.counts`` it applied
        self.outcome_events = 0
        self.counts_applied = 0
        self.refitter = Refitter(
            index,
            publisher,
            conn.settings,
            own_id=self.keeper_id,
            model_id=embedder.model_id,
            registered=self._registered,
        )

    # --- life cycle ------------------------------------------------------------------------
    async def start(self) -> None:
        self.refitter.runner.start()  # the fit process imports while the index loads
        self.snapshot.on_change(self._on_agent_change)
        for agent_id in [a.agent_id for a in self.snapshot.all_agents()]:
            await self._sync_agent(agent_id)
        await self._await_arrivals()
        await self._load_memories()
        await self.refitter.refit(here=True)  # nothing is routed yet: no loop to keep free
        await self.subscriber.start()
        self._loop_task = asyncio.create_task(self._maintain(), name=f"keeper-{self.keeper_id}")

    async def _await_arrivals(self) -> None:
        """While agents are registering, take them in until registrations pause for
        `ARRIVALS_QUIET_S` (at most `ARRIVALS_WAIT_S`); at once when none registered lately."""
        now = now_ms()
        recent = now - int(ARRIVALS_QUIET_S * 1000)
        if not any(
            i.registered_ms >= recent
            for a in self.snapshot.all_agents()
            for i in a.live_instances(now)
        ):
            return
        deadline = time.monotonic() + ARRIVALS_WAIT_S
        while (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(ARRIVALS_QUIET_S, left)):
                    await self._wake.wait()
            self._wake.clear()
            if not await self._sync_changed():
                return

    async def _sync_changed(self) -> bool:
        """Take in the registry changes that came since the last call; False: none came."""
        changed, self._dirty_agents = self._dirty_agents, set()
        for agent_id in changed:
            await self._sync_agent(agent_id)
        if changed:
            self.synced.set()
        return bool(changed)

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        queue = await channel.declare_queue(
            self.conn.topology.selector_queue(self.keeper_id), exclusive=True, auto_delete=True
        )
        for pattern in (*own_outcomes(self.keeper_id), *LEARNING_EVENTS, FITTED_EVENT):
            await queue.bind(self.conn.topology.events, routing_key=pattern)
        return queue

    async def close(self) -> None:
        self.refitter.close()
        for task in (self._loop_task, self._fit_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._loop_task = self._fit_task = None
        await self.subscriber.close()
        with contextlib.suppress(Exception):
            await self._flush(force=True)  # what was queued still reaches Redis

    @property
    def fits(self) -> int:
        return self.refitter.fits

    @property
    def fit_cpu_s(self) -> float:
        return self.refitter.fit_cpu_s

    @property
    def fits_yielded(self) -> int:
        return self.refitter.fits_yielded

    # --- reads for the selector ------------------------------------------------------------
    def is_live(self, agent_id: str) -> bool:
        state = self.snapshot.agent(agent_id)
        return state is not None and state.is_live(now_ms())

    def count_dispatch(self, agent_id: str) -> None:
        """One more task in flight until a heartbeat taken after it or its outcome says
        otherwise (no herding): a load refresh from an older heartbeat keeps it."""
        self.index.count_dispatch(agent_id)
        self._unheard.sent(agent_id, now_ms())

    # --- registry changes ------------------------------------------------------------------
    def _on_agent_change(self, agent_id: str) -> None:
        self._dirty_agents.add(agent_id)
        self._wake.set()

    async def _sync_agent(self, agent_id: str) -> None:
        state = self.snapshot.agent(agent_id)
        now = now_ms()
        if state is None or state.registration is None or not state.is_live(now):
            if agent_id in self.index:
                # keep the row (vectors are costly) but stop routing to it
                self.index.set_stats(agent_id, AgentStats(status="down"))
            if state is None or not self.snapshot.awaited(agent_id, now):
                return
            # restarting when this router started: its row is added, down (the selector
            # offers it only as an agent awaited, `SemanticSelector.decide`)
        reg = state.registration
        assert reg is not None
        signature = (
            reg.capability_text,
            tuple(reg.examples),
            tuple(sorted(reg.tags.items())),
            tuple(reg.keywords),
        )
        if self._registered.get(agent_id) != signature or agent_id not in self.index:
            vectors = await self.vectors.embed([reg.capability_text, *reg.examples])
            self.index.add(
                agent_id,
                vectors[0],
                vectors[1:],
                tags=reg.tags,
                keywords=reg.keywords,
                stats=self.stats_of(state, now),
                texts=[reg.capability_text, *reg.examples],
            )
            self._registered[agent_id] = signature
            self._memory_dirty.add(agent_id)
            self.refitter.changed(registration=True)
        else:
            self.index.set_stats(agent_id, self.stats_of(state, now))

    def stats_of(self, state: AgentState, now: int) -> AgentStats:
        load = state.load(now) + self._unheard_by(state, now)
        reg = state.registration
        return AgentStats(
            load=load,
            max_concurrency=max(state.capacity(now), 1),
            success_rate=self.ledger.success_rate(state.agent_id),
            idle_s=1e9 if load == 0 else 0.0,
            status="up" if state.is_live(now) else "down",
            # a registration's priority_bonus in [-1, 1] is worth up to 0.2 of the total
            # (a bonus of at most 0.2 beside the similarity), i.e. 10 levels of 0.02
            priority=round((reg.priority_bonus if reg else 0.0) * 10),
            completed=self.ledger.completed(state.agent_id),
        )

    def _unheard_by(self, state: AgentState, now: int) -> int:
        """This router's dispatches to `state`'s agent its last heartbeat cannot count."""
        if state.agent_id not in self._unheard:
            return 0
        heard = max((i.last_heartbeat_ms for i in state.live_instances(now)), default=now)
        return self._unheard.count(state.agent_id, heard, now, self.settings.lease_ttl_ms)

    def _take_stats_due(self) -> set[str]:
        due, self._stats_due = self._stats_due, set()
        return due

    def _refresh_stats(self, agent_ids: Iterable[str] | None = None) -> None:
        """Loads arrive with lease renewals, which fire no hook: re-read them periodically
        (`agent_ids`: only those, after their outcomes)."""
        now = now_ms()
        for agent_id in self.index.ids if agent_ids is None else agent_ids:
            if agent_id not in self.index:
                continue
            state = self.snapshot.agent(agent_id)
            if state is not None:
                self.index.set_stats(agent_id, self.stats_of(state, now))

    def _index_returned(self) -> None:
        """An agent whose lease looked lapsed when it joined (a slow renewal) is indexed
        once a renewal makes it live: renewals fire no registry hook."""
        now = now_ms()
        for state in self.snapshot.all_agents():
            if state.agent_id not in self.index and state.is_live(now):
                self._dirty_agents.add(state.agent_id)
        if self._dirty_agents:
            self._wake.set()

    # --- the background loop ---------------------------------------------------------------
    async def _maintain(self) -> None:
        """Apply registry changes, write queued records, learn, refresh loads, refit."""
        last_stats = time.monotonic()
        while True:
            raise_if_cancelling()
            now = time.monotonic()
            due = self._due_at()
            wake_at = now + STATS_REFRESH_S if due is None else min(due, now + STATS_REFRESH_S)
            if self.index.dirty:
                wake_at = min(wake_at, now + SETTLE_S / 2)  # notice when the changes settle
            self._wake_at = wake_at
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, wake_at - now)):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._sync_changed()
                await self._flush()
                if self._memory_dirty:
                    await self._load_memories()
                if time.monotonic() - last_stats >= STATS_REFRESH_S:
                    self._stats_due.clear()
                    self._refresh_stats()
                    self._index_returned()
                    last_stats = time.monotonic()
                elif self._stats_due:
                    self._refresh_stats(self._take_stats_due())
                full = None if self._fit_task else self.refitter.plan(time.monotonic())
                if full is not None:
                    self._fit_task = asyncio.create_task(
                        self._refit(full), name=f"refit-{self.keeper_id}"
                    )
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if not self.conn.outages.report(exc, what="the index upkeep"):
                    logger.error("index upkeep failed; retrying next round", exc_info=True)

    async def _refit(self, full: bool) -> None:
        """A head fit beside the loop, which keeps writing records and learning meanwhile
        (the changes it makes are what tells a fit of the settled index to give way)."""
        try:
            await self.refitter.refit(full)
        except Exception as exc:
            if not self.conn.outages.report(exc, what="a head refit"):
                logger.error("head refit failed; fitting again next round", exc_info=True)
        finally:
            self._fit_task = None
            self._wake.set()

    # --- memories --------------------------------------------------------------------------
    async def _load_memories(self) -> None:
        agents, self._memory_dirty = self._memory_dirty, set()
        for agent_id in agents:
            if agent_id not in self.index:
                continue
            memory = await self.memory.load(agent_id)
            self.ledger.merge(agent_id, memory)
            vectors = await self.vectors.embed(list(memory.texts))
            self.index.set_memory(
                agent_id,
                vectors,
                seen=memory.seen,
                bad=memory.bad,
                texts=list(memory.texts),
                slots=list(memory.slots),
            )
            self.refitter.changed()
            state = self.snapshot.agent(agent_id)
            if state is not None:
                self.index.set_stats(agent_id, self.stats_of(state, now_ms()))

    def _due_at(self) -> float | None:
        """When queued work is due (monotonic; None: nothing is queued). Records are written
        every `FLUSH_INTERVAL_S` and counts announced every `COUNTS_INTERVAL_S`, however
        many outcome messages arrive in between: a router that sees a share of the tasks
        sends as few messages as one that sees them all, each one less full."""
        due: list[float] = []
        if self.ledger.writes_pending:
            due.append(self._last_flush + FLUSH_INTERVAL_S)
        if self.ledger.counts_pending:
            due.append(self._last_counts + COUNTS_INTERVAL_S)
        return min(due) if due else None

    async def _flush(self, *, force: bool = False) -> None:
        """Announce the counts and write the queued records that are due (`force`: all);
        apply and announce the texts that took a slot."""
        now = time.monotonic()
        if self.ledger.counts_pending and (force or now - self._last_counts >= COUNTS_INTERVAL_S):
            self._last_counts = now
            counted = self.ledger.take_counts()
            await self.publisher.emit(
                Event(type=COUNTS_EVENT, data={"from": self.keeper_id, "counts": counted})
            )
        if not self.ledger.writes_pending or not (
            force or now - self._last_flush >= FLUSH_INTERVAL_S
        ):
            return
        self._last_flush = now
        learned = await self.ledger.flush()
        if not learned:
            return
        # the query texts were embedded when they were routed: the LRU has them (read on
        # the loop; a worker thread only for those it lost)
        texts = [item.text for item in learned]
        vectors = cached_vectors(self.embedder, texts)
        if vectors is None:
            vectors = await asyncio.to_thread(self.embedder.embed, texts)
        for item, vec in zip(learned, vectors, strict=True):
            if self.index.learn_at(item.agent_id, item.slot, vec, item.text):
                self.learned_here += 1
                self.refitter.changed()
        await self.publisher.emit(self._learned_event(learned, vectors))

    def _learned_event(self, learned: list[Learned], vectors: np.ndarray[Any, Any]) -> Event:
        """One ``route.learned`` event for every text of a flush (slot, text, vector)."""
        return Event(
            type=LEARNED_EVENT,
            data={
                "model": self.embedder.model_id,
                "from": self.keeper_id,
                "items": [
                    {
                        "agent_id": item.agent_id,
                        "task_id": item.task_id,
                        "slot": item.slot,
                        "text": item.text,
                        "vector": base64.b64encode(np.asarray(vec, "<f4").tobytes()).decode(),
                    }
                    for item, vec in zip(learned, vectors, strict=True)
                ],
            },
        )

    # --- events ----------------------------------------------------------------------------
    async def _on_event(self, event: Event, message: AbstractIncomingMessage) -> None:
        if not self.trust.believes(message.user_id, event):
            logger.warning(
                "%s from user %r ignored (not entitled to it)", event.type, message.user_id
            )
            return
        try:
            if event.type == LEARNED_EVENT and self.trust.enabled:
                event = await self._vouched(event)
            self.take(event, own=message.routing_key != event.type)
        except Exception:
            logger.error("learning from %s failed", event.type, exc_info=True)

    def take(self, event: Event, *, own: bool = False) -> None:
        """Apply one learning event (outcome, feedback, a text or the counts another router
        learned); `own`: an outcome of this router's dispatch (tagged for it)."""
        if event.type == LEARNED_EVENT:
            self._apply_learned(event)
            return
        if event.type == COUNTS_EVENT:
            if event.data.get("from") != self.keeper_id:
                self._stats_due.update(self.ledger.apply_counts(event.data.get("counts", {})))
                self.counts_applied += 1
            return
        if event.type == FITTED_EVENT:
            self.refitter.take(event)
            return
        if event.type == "route.feedback":
            if event.agent_id is not None and event.data.get("counted", True):
                self._memory_dirty.add(event.agent_id)
                self._wake.set()
            return
        agent_id = self.ledger.observe(event, own=own)
        self.outcome_events += 1
        if agent_id is None:
            return
        if own:
            self._unheard.ended(agent_id)  # one of this router's tasks there ended
        # its stats are refreshed once per round of the loop, however many outcomes came
        self._stats_due.add(agent_id)
        due = self._due_at()
        if due is not None and due < self._wake_at:
            self._wake.set()  # the loop sleeps past what is now due

    async def _vouched(self, event: Event) -> Event:
        """A ``route.learned`` with only the items its tasks' routing records vouch for.

        Under access control a learned item is believed item by item, not for its sender
        alone: the record a router wrote when it routed the task (`Keys.outcome`, which
        only routers write) must name the item's agent and text. So an item for an agent
        the task was never dispatched to, or with another text, is dropped and counted
        (`learned_refused`). One round trip for the whole event.
        """
        items = [i for i in event.data.get("items", ()) if isinstance(i, dict)]
        if not items or event.data.get("from") == self.keeper_id:
            return event
        pipe = self.conn.redis.pipeline(transaction=False)
        for item in items:
            pipe.hmget(self.conn.keys.outcome(str(item.get("task_id") or "")), "agent_id", "text")
        records = await pipe.execute()
        kept = []
        for item, (agent_id, text) in zip(items, records, strict=True):
            if (
                item.get("task_id")
                and agent_id is not None
                and _s(agent_id) == str(item.get("agent_id"))
                and text is not None
                and _s(text) == str(item.get("text"))
            ):
                kept.append(item)
            else:
                self.learned_refused += 1
                logger.warning(
                    "route.learned item for agent %r (task %r) ignored: the task's routing "
                    "record does not vouch for it",
                    item.get("agent_id"),
                    item.get("task_id"),
                )
        return event.model_copy(update={"data": {**event.data, "items": kept}})

    def _apply_learned(self, event: Event) -> None:
        data = event.data
        if data.get("from") == self.keeper_id:
            return
        for item in data.get("items", ()):
            agent_id = str(item["agent_id"])
            if data.get("model") != self.embedder.model_id:
                self._memory_dirty.add(agent_id)  # another model: read and embed it whole
                self._wake.set()
                continue
            vec = np.frombuffer(base64.b64decode(item["vector"]), "<f4").astype(np.float32)
            if vec.shape != (self.embedder.dim,):
                continue
            if self.index.learn_at(agent_id, int(item["slot"]), vec, str(item["text"])):
                self.learned_elsewhere += 1
                self.refitter.changed()

    async def wait_routable(
        self, agent_ids: Sequence[str], timeout: float, routable: Callable[[str], bool]
    ) -> None:
        """Return once `routable(a)` holds for every agent of `agent_ids`."""
        async with asyncio.timeout(timeout):
            while not all(routable(a) for a in agent_ids):
                self.synced.clear()
                await self.synced.wait()
