"""`SemanticSelector`: chooses an agent for an envelope without a `target`.

It keeps a `CapabilityIndex` in step with the registry's live snapshot, embeds the task's
capability text (LRU cache, micro-batches), scores every live agent in one numpy pass, and
walks the fallbacks of DESIGN section 6: arbitration of near ties (in `scoring`), a call
for bids when nothing clears the threshold, the fallback agent with `low_confidence`, or
None (the router then dead-letters the task as unroutable).

It also learns: outcomes seen on `mesh.events` feed the circuit breakers, the success
rates and, for tasks completed without a reroute, the agent's example memory in Redis.
A background loop reloads changed memories and refits the prototypes off the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage

from mesh.connection import MeshConnection
from mesh.messaging import Publisher
from mesh.registry.snapshot import AgentSnapshot
from mesh.registry.state import AgentState
from mesh.router.batcher import QueryBatcher
from mesh.router.bids import BidCollector
from mesh.router.breaker import BreakerBoard
from mesh.router.calibrate import resolve_threshold
from mesh.router.embedding import Embedder
from mesh.router.index import AgentStats, CapabilityIndex
from mesh.router.memory import ExampleMemory
from mesh.router.outcomes import LEARNING_EVENTS, OutcomeLedger
from mesh.router.scoring import Decision, ScoreWeights, score
from mesh.router.service import RouteChoice
from mesh.router.vectors import VectorCache
from mesh.tasks import raise_if_cancelling
from schemas import Event, InvalidEnvelope, RouteInfo, TaskEnvelope, decode, new_id, now_ms

logger = logging.getLogger(__name__)

#: how many candidates a `route.decision` event lists (all of them below this many agents)
EXPLAIN_LIMIT = 25
#: how often loads and liveness are copied from the snapshot into the index
STATS_REFRESH_S = 1.0
#: the pause between two fits is at least this many times the last fit's duration: under
#: steady learning a fit (2-3 s on two cores for 150 agents) takes at most a tenth of the
#: time; learned texts move the centroids at once, only the head waits for the next fit
REFIT_DUTY = 9.0


class SemanticSelector:
    """The semantic router's choice of agent. ``await start()`` before the router consumes."""

    def __init__(
        self,
        conn: MeshConnection,
        embedder: Embedder,
        snapshot: AgentSnapshot,
        *,
        publisher: Publisher | None = None,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.conn = conn
        self.settings = s = conn.settings
        self.embedder = embedder
        self.snapshot = snapshot
        self.publisher = publisher or Publisher(conn)
        self.index = CapabilityIndex(embedder.dim, memory_size=s.example_memory_size)
        self.threshold = resolve_threshold(s, embedder.model_id)
        self.weights = ScoreWeights.from_settings(s, threshold=self.threshold)
        self.breakers = BreakerBoard(
            window_s=s.breaker_window_s,
            failure_ratio=s.breaker_failure_ratio,
            min_calls=s.breaker_min_calls,
            open_s=s.breaker_open_s,
        )
        self.vectors = VectorCache(conn.redis, conn.keys, embedder)
        self.memory = ExampleMemory(conn.redis, conn.keys, s.example_memory_size)
        self.batcher = QueryBatcher(embedder, s.embed_batch_size)
        self.bids = BidCollector(conn, self.publisher)
        self.rng = rng or np.random.default_rng()
        self.ledger = OutcomeLedger(conn, self.memory, self.breakers)
        self._registered: dict[str, Any] = {}
        self._dirty_agents: set[str] = set()
        self._wake = asyncio.Event()
        #: set whenever the index took in a registry change
        self._synced = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._events_channel: AbstractChannel | None = None

    # --- life cycle ------------------------------------------------------------------------
    async def start(self) -> None:
        await self.publisher.start()
        await self.bids.start()
        self.snapshot.on_change(self._on_agent_change)
        for agent_id in [a.agent_id for a in self.snapshot.all_agents()]:
            await self._sync_agent(agent_id)
            self.ledger.memory_dirty.add(agent_id)
        await self._reload_memories()
        await self._refit()
        self._events_channel = await self.conn.channel(confirms=False, prefetch=1_000)
        queue = await self._events_channel.declare_queue(
            self.conn.topology.selector_queue(new_id()[:12]), exclusive=True, auto_delete=True
        )
        for pattern in LEARNING_EVENTS:
            await queue.bind(self.conn.topology.events, routing_key=pattern)
        await queue.consume(self._on_event, no_ack=True)
        self._loop_task = asyncio.create_task(self._maintain())
        logger.info(
            "semantic selector ready: %d agents, model=%s threshold=%.3f",
            len(self.index), self.embedder.model_id, self.threshold,
        )

    async def close(self) -> None:
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        channel, self._events_channel = self._events_channel, None
        if channel is not None and not channel.is_closed:
            await channel.close()
        await self.batcher.close()
        await self.bids.close()

    # --- keeping the index in step with the registry ---------------------------------------
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
            return
        reg = state.registration
        signature = (reg.capability_text, tuple(reg.examples), tuple(sorted(reg.tags.items())),
                     tuple(reg.keywords))
        if self._registered.get(agent_id) != signature or agent_id not in self.index:
            vectors = await self.vectors.embed([reg.capability_text, *reg.examples])
            self.index.add(
                agent_id, vectors[0], vectors[1:], tags=reg.tags, keywords=reg.keywords,
                stats=self._stats(state, now), texts=[reg.capability_text, *reg.examples],
            )
            self._registered[agent_id] = signature
            self.ledger.memory_dirty.add(agent_id)
        else:
            self.index.set_stats(agent_id, self._stats(state, now))

    def _stats(self, state: AgentState, now: int) -> AgentStats:
        load = state.load(now)
        reg = state.registration
        return AgentStats(
            load=load,
            max_concurrency=max(state.capacity(now), 1),
            success_rate=self.ledger.success_rate(state.agent_id),
            idle_s=1e9 if load == 0 else 0.0,
            status="up" if state.is_live(now) else "down",
            # a registration's priority_bonus in [-1, 1] is worth up to 0.2 of the total
            # (seed 003: 0.8 similarity + 0.2 bonus), i.e. 10 levels of 0.02
            priority=round((reg.priority_bonus if reg else 0.0) * 10),
            completed=self.ledger.completed(state.agent_id),
        )

    async def _maintain(self) -> None:
        """Apply registry changes, refresh loads, reload changed memories, refit when needed."""
        last_refit = time.monotonic()
        last_stats = time.monotonic()
        last_fit_s = 0.0
        while True:
            raise_if_cancelling()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(self.settings.refit_interval_s, STATS_REFRESH_S)):
                    await self._wake.wait()
            self._wake.clear()
            try:
                changed, self._dirty_agents = self._dirty_agents, set()
                for agent_id in changed:
                    await self._sync_agent(agent_id)
                if changed:
                    self._synced.set()
                if time.monotonic() - last_stats >= STATS_REFRESH_S:
                    self._refresh_stats()
                    last_stats = time.monotonic()
                if self.ledger.memory_dirty:
                    await self._reload_memories()
                # a fit takes seconds of CPU for a large mesh: it gets at most a
                # 1 / (1 + REFIT_DUTY) share of the time, however often memories change
                gap = max(self.settings.refit_interval_s, REFIT_DUTY * last_fit_s)
                if self.index.dirty and (
                    time.monotonic() - last_refit >= gap or len(self.index) <= 2
                ):
                    started = time.monotonic()
                    await self._refit()
                    last_refit = time.monotonic()
                    last_fit_s = last_refit - started
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.error("selector maintenance failed; retrying next round", exc_info=True)

    def _refresh_stats(self) -> None:
        """Loads arrive with lease renewals, which fire no hook: re-read them periodically."""
        now = now_ms()
        for agent_id in self.index.ids:
            state = self.snapshot.agent(agent_id)
            if state is not None:
                self.index.set_stats(agent_id, self._stats(state, now))

    async def _reload_memories(self) -> None:
        agents, self.ledger.memory_dirty = self.ledger.memory_dirty, set()
        for agent_id in agents:
            if agent_id not in self.index:
                continue
            memory = await self.memory.load(agent_id)
            self.ledger.merge(agent_id, memory)
            vectors = await self.vectors.embed(list(memory.texts))
            self.index.set_memory(
                agent_id, vectors, seen=memory.seen, bad=memory.bad, texts=list(memory.texts)
            )
            state = self.snapshot.agent(agent_id)
            if state is not None:
                self.index.set_stats(agent_id, self._stats(state, now_ms()))

    async def _refit(self) -> None:
        fit = getattr(self.index, "fit_directions", None)
        if fit is None:
            self.index.refit()
            return
        result = await asyncio.to_thread(fit)
        self.index.apply_fit(result)

    # --- choosing --------------------------------------------------------------------------
    async def decide(
        self, capability: str, required_tags: dict[str, str], excluded: list[str]
    ) -> Decision:
        """Score every agent for `capability` (used by `select` and by `mesh explain`)."""
        query = await self.batcher.embed(capability)
        blocked = {a for a in excluded if a in self.index}
        blocked |= {a for a in self.breakers.blocked() if a in self.index}
        saved: dict[str, AgentStats] = {}
        try:
            while True:
                for agent_id in blocked - saved.keys():
                    saved[agent_id] = self.index.stats(agent_id)
                    self.index.set_stats(agent_id, _unavailable(saved[agent_id]))
                decision = score(
                    self.index, query, self.weights, query_text=capability,
                    required_tags=required_tags, rng=self.rng,
                )
                chosen = decision.agent_id
                if chosen is None or self._is_live(chosen):
                    return decision
                # the index learns of a lapsed lease from an event; the snapshot knows it
                # at read time: never choose an agent whose every lease has lapsed
                blocked.add(chosen)
        finally:
            for agent_id, stats in saved.items():
                self.index.set_stats(agent_id, stats)

    async def wait_routable(self, agent_ids: Sequence[str], timeout: float) -> None:
        """Return once every agent of `agent_ids` is routable; TimeoutError after `timeout`."""
        async with asyncio.timeout(timeout):
            while not all(self.is_routable(a) for a in agent_ids):
                self._synced.clear()
                await self._synced.wait()

    def is_routable(self, agent_id: str) -> bool:
        """Is `agent_id` in the index and live (what `start_mesh` waits for)?"""
        return agent_id in self.index and self._is_live(agent_id)

    def _is_live(self, agent_id: str) -> bool:
        state = self.snapshot.agent(agent_id)
        return state is not None and state.is_live(now_ms())

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | None:
        decision = await self.decide(
            envelope.capability, dict(envelope.required_tags), list(envelope.excluded_agents)
        )
        explain: dict[str, Any] = {
            "threshold": round(self.threshold, 4),
            "candidates": [c.as_dict() for c in decision.candidates(EXPLAIN_LIMIT)],
            "agents": len(self.index),
            "runner_up": decision.runner_up,
        }
        choice: RouteChoice | None = None
        if decision.agent_id is not None:
            best = decision.candidate(self.index.row(decision.agent_id))
            strategy = {"best": "semantic", "arbitrated": "arbitration",
                        "explore": "exploration"}[decision.strategy]
            choice = RouteChoice(
                decision.agent_id,
                RouteInfo(strategy=strategy, score=round(best.total, 4),
                          low_confidence=best.similarity < self.settings.low_confidence_threshold),
                {"runner_up": decision.runner_up},
            )
        else:
            choice = await self._bid_or_fallback(envelope, decision, explain)
        await self._emit_decision(envelope, choice, explain)
        if choice is not None:
            self.breakers.on_dispatch(choice.agent_id)
            self._count_dispatch(choice.agent_id)
            await self.ledger.remember(envelope, choice.agent_id)
        return choice

    async def _bid_or_fallback(
        self, envelope: TaskEnvelope, decision: Decision, explain: dict[str, Any]
    ) -> RouteChoice | None:
        candidates = [a for a in decision.bid_candidates(self.settings.bid_top_k)
                      if a not in envelope.excluded_agents]
        if candidates:
            left = (envelope.deadline_ms or now_ms() + envelope.timeout_ms) - now_ms()
            window = min(self.settings.bid_window_ms, max(left // 4, 0))
            winner, bids = await self.bids.call(envelope, candidates, window)
            explain["bids"] = [b.model_dump() for b in bids]
            if winner is not None:
                return RouteChoice(
                    winner.agent_id,
                    RouteInfo(strategy="bid", score=winner.confidence,
                              low_confidence=winner.confidence
                              < self.settings.low_confidence_threshold),
                    {},
                )
        fallback = self.settings.fallback_agent
        if fallback and fallback not in envelope.excluded_agents:
            state = self.snapshot.agent(fallback)
            if state is not None and state.is_live(now_ms()):
                return RouteChoice(
                    fallback,
                    RouteInfo(strategy="fallback", score=decision.best_similarity(),
                              low_confidence=True),
                    {},
                )
        return None

    async def _emit_decision(
        self, envelope: TaskEnvelope, choice: RouteChoice | None, explain: dict[str, Any]
    ) -> None:
        await self.publisher.emit(
            Event(
                type="route.decision",
                trace_id=envelope.trace_id,
                task_id=envelope.task_id,
                agent_id=choice.agent_id if choice else None,
                data={
                    "capability": envelope.capability[:500],
                    "route": choice.route.model_dump() if choice else None,
                    "excluded": list(envelope.excluded_agents),
                    **explain,
                },
            )
        )

    def _count_dispatch(self, agent_id: str) -> None:
        """One more task in flight until the next heartbeat says otherwise (no herding)."""
        if agent_id in self.index:
            stats = self.index.stats(agent_id)
            self.index.set_stats(agent_id, replace(stats, load=stats.load + 1, idle_s=0.0))

    # --- learning from outcomes ------------------------------------------------------------
    async def _on_event(self, message: AbstractIncomingMessage) -> None:
        try:
            event = decode(Event, message.body)
        except InvalidEnvelope:
            return
        try:
            await self.learn(event)
        except Exception:
            logger.error("learning from %s failed", event.type, exc_info=True)

    async def learn(self, event: Event) -> None:
        agent_id = await self.ledger.observe(event)
        if agent_id is None:
            return
        if self.ledger.memory_dirty:
            self._wake.set()
        state = self.snapshot.agent(agent_id)
        if state is not None and agent_id in self.index:
            self.index.set_stats(agent_id, self._stats(state, now_ms()))


def _unavailable(stats: AgentStats) -> AgentStats:
    return AgentStats(
        load=stats.load, max_concurrency=stats.max_concurrency, success_rate=stats.success_rate,
        idle_s=stats.idle_s, status="unavailable", priority=stats.priority,
        completed=stats.completed,
    )
