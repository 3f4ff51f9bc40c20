"""`SemanticSelector`: chooses an agent for an envelope without a `target`.

Choosing is a pure function of the index (`scoring.score` over `CapabilityIndex`): the
task's capability text is embedded (LRU cache, micro-batches), every live agent is scored
in one numpy pass, and the fallbacks of docs/design.md section 6 follow: arbitration of near ties
(in `scoring`); when no live agent clears the threshold, the agents that are restarting
(no live instance, a lease ended within ``agent_return_window_s``) scored alone, the
chosen one's task waiting in its queue (``route.waiting_for_instance``); a call for bids
when nothing clears the threshold, the fallback agent with `low_confidence`, or a
`NoMatch` saying why nobody (`mesh.router.misses`): the router then hands the task to a
person or dead-letters it as unroutable (`mesh.router.reasons`).

`select` changes nothing; `dispatched` is the router's hook once a chosen dispatch was
published and confirmed: only then does it count against the agent's breaker probe and
load, and is it remembered for learning. Keeping the index in step with the mesh
(registrations, loads, outcomes, learned texts, refits) is `IndexKeeper`'s job.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from mesh.connection import MeshConnection
from mesh.errors import ConfigError
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.payload_schema import checker, field_errors
from mesh.registry.snapshot import AgentSnapshot
from mesh.router.batcher import QueryBatcher
from mesh.router.bids import BidCollector
from mesh.router.breaker import BreakerBoard, SharedBreakers
from mesh.router.embedding import Embedder
from mesh.router.index import CapabilityIndex
from mesh.router.keeper import IndexKeeper
from mesh.router.memory import ExampleMemory
from mesh.router.misses import miss_of
from mesh.router.outcomes import OutcomeLedger
from mesh.router.plan import RouteChoice, publish_decision
from mesh.router.reasons import NoMatch
from mesh.router.scoring import Decision, ScoreWeights, score
from mesh.router.thresholds import resolve_threshold
from mesh.schemas import RouteInfo, TaskEnvelope, now_ms
from mesh.schemas.result import Strategy
from mesh.topology import redacts_decisions

logger = logging.getLogger(__name__)

#: how many candidates a `route.decision` event lists (`mesh explain` shows them all)
EXPLAIN_LIMIT = 5
#: decision strategies as the route names them
_STRATEGIES: dict[str, Strategy] = {
    "best": "semantic",
    "arbitrated": "arbitration",
    "explore": "exploration",
}


class SemanticSelector(Lifecycle):
    """The semantic router's choice of agent. ``await start()`` before the router consumes."""

    def __init__(
        self,
        conn: MeshConnection,
        embedder: Embedder,
        snapshot: AgentSnapshot,
        *,
        publisher: Publisher | None = None,
    ) -> None:
        self.conn = conn
        self.settings = s = conn.settings
        self._redact_decisions = redacts_decisions(s.access_control, s.observer_reads_requests)
        self.embedder = embedder
        self.snapshot = snapshot
        self.publisher = publisher or Publisher(conn)
        self.index = CapabilityIndex(embedder.dim, memory_size=s.example_memory_size)
        self.threshold = resolve_threshold(s, embedder.model_id)
        self.weights = ScoreWeights.from_settings(s, threshold=self.threshold)
        #: breaker openings shared with every router through Redis
        self.shared_breakers = SharedBreakers(conn.redis, conn.keys)
        self.breakers = BreakerBoard(
            window_s=s.breaker_window_s,
            failure_ratio=s.breaker_failure_ratio,
            min_calls=s.breaker_min_calls,
            open_s=s.breaker_open_s,
            on_open=self.shared_breakers.publish,
        )
        self.batcher = QueryBatcher(embedder, s.embed_batch_size)
        self.bids = BidCollector(conn, self.publisher)
        memory = ExampleMemory(conn.redis, conn.keys, s.example_memory_size)
        self.ledger = OutcomeLedger(conn, memory, self.breakers)
        self.keeper = IndexKeeper(conn, embedder, snapshot, self.index, self.ledger, self.publisher)
        self._started = False

    # --- life cycle ------------------------------------------------------------------------
    async def start(self) -> None:
        """Load the index and follow the mesh; a second call does nothing."""
        if self._started:
            return
        self._started = True
        await self.publisher.start()
        await self.bids.start()
        await self.keeper.start()
        logger.info(
            "semantic selector ready: %d agents, model=%s threshold=%.3f",
            len(self.index),
            self.embedder.model_id,
            self.threshold,
        )

    async def close(self) -> None:
        self._started = False
        await self.keeper.close()
        await self.batcher.close()
        await self.bids.close()

    # --- choosing --------------------------------------------------------------------------
    async def decide(
        self,
        capability: str,
        required_tags: dict[str, str],
        excluded: list[str],
        *,
        explore: bool = True,
    ) -> Decision:
        """Score every agent for `capability` (used by `select` and by `mesh explain`).

        Pure with respect to the index: agents that are excluded, behind an open breaker
        or whose every lease lapsed are passed to `score` as blocked rows. Without
        `explore` no cold agent is given the task on its quota (multi-intent detection:
        `mesh.router.compound`); the quota counts only what `select` acts on.
        """
        query = await self.batcher.embed(capability)
        index = self.index
        refused = np.zeros(len(index), np.bool_)
        for agent_id in (*excluded, *self.breakers.blocked()):
            if agent_id in index:
                refused[index.row(agent_id)] = True
        blocked = refused.copy()
        while True:
            decision = score(
                index,
                query,
                self.weights,
                query_text=capability,
                required_tags=required_tags,
                quota=self.ledger.quota if explore else None,
                blocked=blocked,
            )
            chosen = decision.agent_id
            if chosen is None or self.keeper.is_live(chosen):
                break
            # the index learns of a lapsed lease from an event; the snapshot knows it at
            # read time: never choose an agent whose every lease has lapsed
            blocked[index.row(chosen)] = True
        if decision.agent_id is not None:
            return decision
        # no live agent qualifies: one that is restarting (`AgentSnapshot.awaited`) may,
        # and its task waits in its queue; scored alone, so a live agent that clears the
        # threshold always wins over it, and the decision explained is the live one's
        awaited = self._awaited_rows()
        if not awaited.any():
            return decision
        waiting = score(
            index,
            query,
            self.weights,
            query_text=capability,
            required_tags=required_tags,
            blocked=refused,
            routable=awaited,
        )
        return decision if waiting.agent_id is None else waiting

    def _awaited_rows(self) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Rows of the agents with no live instance whose last lease ended within
        ``agent_return_window_s`` (a restart or a deploy under way)."""
        rows = np.zeros(len(self.index), np.bool_)
        now = now_ms()
        window_ms = int(self.settings.agent_return_window_s * 1000)
        for state in self.snapshot.all_agents():
            if state.agent_id in self.index and state.awaited(now, window_ms):
                rows[self.index.row(state.agent_id)] = True
        return rows

    def miss(
        self, decision: Decision, required_tags: dict[str, str], excluded: list[str]
    ) -> NoMatch:
        """Why `decision` chose nobody, and what the fallback agent can do (`mesh explain`
        reads it too); no bids are called."""
        miss = miss_of(
            decision,
            required_tags=required_tags,
            tag_mask=self.index.tag_mask,
            excluded=excluded,
            breaker_open=self.breakers.blocked(),
            last_live_ms=self.last_live_ms,
        )
        fallback = self.settings.fallback_agent
        if miss.cause != "below_threshold" or not fallback:
            return miss
        if fallback in excluded:
            why = "was tried already (it rejected the task or did not take it)"
        elif not self.keeper.is_live(fallback):
            since = self.last_live_ms(fallback)
            ago = (
                ""
                if since is None
                else f" (its last lease ended {(now_ms() - since) // 1000} s ago)"
            )
            why = "has no live instance" + ago
        else:
            why = "could take it"
        return replace(miss, fallback=fallback, fallback_why=why)

    def last_live_ms(self, agent_id: str) -> int | None:
        """When `agent_id`'s last lease ended or ends (epoch ms; None: no instance known)."""
        state = self.snapshot.agent(agent_id)
        return None if state is None else state.last_live_ms(now_ms())

    async def select(self, envelope: TaskEnvelope) -> RouteChoice | NoMatch:
        decision = await self.decide(
            envelope.capability, dict(envelope.required_tags), list(envelope.excluded_agents)
        )
        explain: dict[str, Any] = {
            "threshold": round(self.threshold, 4),
            "candidates": [c.as_dict() for c in decision.candidates(EXPLAIN_LIMIT)],
            "agents": len(self.index),
            "runner_up": decision.runner_up,
        }
        if decision.agent_id is not None:
            row = self.index.row(decision.agent_id)
            total, similarity = float(decision.total[row]), float(decision.similarity[row])
            waiting = not self.keeper.is_live(decision.agent_id)
            if waiting:
                explain["waiting_for_instance"] = True
            detour = self._detour_around(decision, row)
            if detour:
                explain["breaker_detour"] = detour
            return RouteChoice(
                decision.agent_id,
                RouteInfo(
                    strategy=_STRATEGIES[decision.strategy],
                    score=round(total, 4),
                    low_confidence=similarity < self.settings.low_confidence_threshold,
                    waiting_for_instance=waiting,
                ),
                explain,
                decision.contested,
                learns=not detour,
            )
        choice = await self._bid_or_fallback(envelope, decision, explain)
        if choice is not None:
            return choice
        miss = self.miss(decision, dict(envelope.required_tags), list(envelope.excluded_agents))
        # nothing to dispatch: the decision log still says why
        explain["miss"] = miss.cause
        await publish_decision(
            self.publisher, envelope, None, {}, explain, redact=self._redact_decisions
        )
        return miss

    def _detour_around(self, decision: Decision, chosen: int) -> list[str]:
        """The agents behind an open breaker that match the task better than the row
        `chosen` (by similarity and keyword): while one does, the choice is a detour."""
        blocked = self.breakers.blocked()
        if not blocked:
            return []

        def relevance(row: int) -> float:
            return float(decision.similarity[row] + decision.keyword[row])

        index, bar = self.index, relevance(chosen)
        return sorted(a for a in blocked if a in index and relevance(index.row(a)) > bar)

    async def admits(self, agent_id: str) -> bool:
        """May a task go to `agent_id` now: its breaker (this router's, or another's through
        Redis) is not open, or half-open with no probe out yet."""
        if not self.breakers.allows(agent_id):
            return False
        if self.breakers.state(agent_id) == "half_open":
            return True  # this router's probe: the shared opening is what it tests
        return await self.shared_breakers.open_until_ms(agent_id) <= now_ms()

    def contract_errors(self, agent_id: str, payload: dict[str, Any]) -> list[dict[str, str]]:
        """How `payload` breaks `agent_id`'s registered input schema ([]: it fits)."""
        state = self.snapshot.agent(agent_id)
        registration = state.registration if state is not None else None
        if registration is None or registration.input_schema is None:
            return []
        try:
            return field_errors(checker(registration.input_schema), payload)
        except ConfigError:  # not a JSON Schema: its worker refuses to start with it
            logger.warning("agent %s registered an input schema that is no JSON Schema", agent_id)
            return []

    def dispatched(self, envelope: TaskEnvelope, choice: RouteChoice) -> None:
        """The router published `choice` and it was confirmed: now it counts. The text of a
        task the router chose is learned when it completes; a target's is not (the caller
        chose the agent: learning it would cost an embedding, a ``route.learned`` for every
        router and head refits, and teach nothing about choosing); nor is a detour's around
        an open breaker (it would keep the detour after the outage)."""
        self.breakers.on_dispatch(choice.agent_id)
        self.keeper.count_dispatch(choice.agent_id)
        learns = choice.learns and choice.route.strategy != "target"
        self.ledger.remember(envelope, choice.agent_id, learns=learns)
        if choice.contested:
            self.ledger.quota.record(choice.contested, choice.agent_id)

    async def _bid_or_fallback(
        self, envelope: TaskEnvelope, decision: Decision, explain: dict[str, Any]
    ) -> RouteChoice | None:
        candidates = [
            a
            for a in decision.bid_candidates(len(decision.ids))
            if a not in envelope.excluded_agents and self.answers_bids(a)
        ][: self.settings.bid_top_k]
        if candidates:
            left = (envelope.deadline_ms or now_ms() + envelope.timeout_ms) - now_ms()
            window = min(self.settings.bid_window_ms, max(left // 4, 0))
            winner, bids = await self.bids.call(envelope, candidates, window)
            explain["bids"] = [b.model_dump() for b in bids]
            if winner is not None:
                return RouteChoice(
                    winner.agent_id,
                    RouteInfo(
                        strategy="bid",
                        score=winner.confidence,
                        low_confidence=winner.confidence < self.settings.low_confidence_threshold,
                    ),
                    explain,
                )
        fallback = self.settings.fallback_agent
        if fallback and fallback not in envelope.excluded_agents and self.keeper.is_live(fallback):
            return RouteChoice(
                fallback,
                RouteInfo(
                    strategy="fallback", score=decision.best_similarity(), low_confidence=True
                ),
                explain,
            )
        return None

    def is_live(self, agent_id: str) -> bool:
        """Does `agent_id` hold a live lease now (the snapshot, at read time)?"""
        return self.keeper.is_live(agent_id)

    @property
    def outcome_tag(self) -> str:
        """Outcomes of this router's dispatches come to its own queue, tagged with this."""
        return self.keeper.keeper_id

    def awaited(self, agent_id: str) -> bool:
        """No live instance, but a lease that ended within ``agent_return_window_s``."""
        return self.snapshot.awaited(agent_id)

    def answers_bids(self, agent_id: str) -> bool:
        """Does `agent_id` answer calls for bids (its registration says so)?"""
        state = self.snapshot.agent(agent_id)
        return state is not None and state.registration is not None and state.registration.bids

    # --- readiness -------------------------------------------------------------------------
    async def wait_routable(self, agent_ids: Sequence[str], timeout: float) -> None:
        """Return once every agent of `agent_ids` is routable; TimeoutError after `timeout`."""
        await self.keeper.wait_routable(agent_ids, timeout, self.is_routable)

    def is_routable(self, agent_id: str) -> bool:
        """Is `agent_id` in the index and live (what `start_mesh` waits for)?"""
        return agent_id in self.index and self.keeper.is_live(agent_id)
