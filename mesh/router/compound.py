"""Compound requests: one request carrying several intents becomes child tasks, one per
part, and its caller gets one merged Result (README "Multi-intent requests").

The router's intake asks `Compound.split` before choosing: a request without a target
whose text splits into clauses (`mesh.router.clauses`) is scored clause by clause and
whole, with the selector's own scoring and no exploration, and `mesh.router.intents`
says whether it is compound. `Compound.run` then:

1. admits the parent as any task (`Intake.admit`: recorded ``submitted -> routing``, a
   duplicate joined or answered);
2. keeps the split with the parent's envelope in Redis (`Keys.compound`; the first pass
   wins, so a redelivered parent dispatches the same children);
3. moves the parent to ``dispatched`` (no agent) and routes each child through the
   router's own steps (choice checks, record, dispatch; the route says ``semantic`` with
   the clause's score and the ``route.decision`` event carries the split): same trace,
   the parent as ``parent_task_id``, the parent's payload, deadline and priority, the
   part's agent as target, a task_id ``<parent>.p<n>``, and as reply_to the routers'
   shared reply queue (`Topology.compound_queue`) with ``<parent>#<n>`` as correlation_id.

Children are the mesh's own tasks: they pass no guard (the parent did) and are recorded
as sent by the parent's sender, so under access control they belong to the caller's trace
and their Results come back through the `ResultForwarder` like any caller's.
`CompoundReplies` (`mesh.router.compound_replies`) takes those Results, from any router.

A router that stops mid-way loses nothing: the parent's ingress message is acked only once
every child is dispatched (redelivered otherwise: the stored split and the children's
task_ids make the second pass dispatch only what is missing), and the children's Results
wait in the durable shared queue for any router.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import orjson

from mesh.router.clauses import Clause, split_clauses
from mesh.router.delivery import Delivery
from mesh.router.intents import Split, find_intents
from mesh.router.plan import Plan, RouteChoice
from mesh.router.scoring import Decision
from mesh.schemas import RouteInfo, TaskEnvelope, encode

if TYPE_CHECKING:
    from mesh.router.choice import Chooser
    from mesh.router.deps import RouterDeps
    from mesh.router.dispatch import Dispatcher
    from mesh.router.endings import Endings
    from mesh.router.intake import Intake

logger = logging.getLogger(__name__)

__all__ = [
    "CORRELATION_SEP",
    "Compound",
    "IntentScorer",
    "Scored",
    "child_task_id",
    "detect",
    "score_clauses",
]

#: between the parent's task_id and the part's number in a child's correlation_id
CORRELATION_SEP = "#"
#: the parent's task_id is cut to this in its children's (task ids are <= 128 characters)
_PARENT_ID_CHARS = 112


@runtime_checkable
class IntentScorer(Protocol):
    """What detection needs of a selector: its decision for a text (`SemanticSelector`)."""

    async def decide(
        self,
        capability: str,
        required_tags: dict[str, str],
        excluded: list[str],
        *,
        explore: bool = True,
    ) -> Decision: ...


def child_task_id(parent_task_id: str, number: int) -> str:
    """The task_id of part `number` (0-based) of a compound request."""
    return f"{parent_task_id[:_PARENT_ID_CHARS]}.p{number + 1}"


@dataclass(frozen=True, slots=True)
class Scored:
    """A request cut into clauses, each clause's decision and the whole text's."""

    clauses: tuple[Clause, ...]
    decisions: tuple[Decision, ...]
    whole: Decision


async def score_clauses(scorer: IntentScorer, envelope: TaskEnvelope) -> Scored | None:
    """Clause by clause and whole, the decisions of `envelope`'s text, without exploration
    (None when the text has one clause: nothing to score twice)."""
    text = envelope.capability
    clauses = split_clauses(text)
    if len(clauses) < 2:
        return None  # the common case: no boundary, no extra scoring
    tags, excluded = dict(envelope.required_tags), list(envelope.excluded_agents)
    texts = (text, *(c.text for c in clauses))
    decisions = await asyncio.gather(
        *(scorer.decide(t, tags, excluded, explore=False) for t in texts)
    )
    return Scored(tuple(clauses), tuple(decisions[1:]), decisions[0])


async def detect(scorer: IntentScorer, envelope: TaskEnvelope, floor: float) -> Split | None:
    """The split of `envelope`'s text, or None when it carries one intent."""
    scored = await score_clauses(scorer, envelope)
    if scored is None:
        return None
    return find_intents(
        envelope.capability, scored.clauses, scored.decisions, scored.whole, floor=floor
    )


class Compound:
    """Splits compound requests and dispatches their children (module docstring)."""

    def __init__(
        self,
        deps: RouterDeps,
        intake: Intake,
        chooser: Chooser,
        dispatcher: Dispatcher,
        endings: Endings,
    ) -> None:
        self.deps = deps
        self.intake = intake
        self.chooser = chooser
        self.dispatcher = dispatcher
        self.endings = endings
        selector = deps.selector
        #: None: multi-intent is off (the setting), or the selector cannot score texts
        self.scorer = (
            selector if deps.settings.multi_intent and isinstance(selector, IntentScorer) else None
        )
        self.queue = deps.topology.compound_queue(deps.publisher.login)
        #: compound requests split (children dispatched)
        self.split_count = 0

    async def split(self, envelope: TaskEnvelope) -> Split | None:
        """The split of a new task's request (None: route it as one task)."""
        if self.scorer is None or envelope.target is not None:
            return None
        return await detect(self.scorer, envelope, self.deps.settings.multi_intent_floor)

    async def run(self, envelope: TaskEnvelope, split: Split, delivery: Delivery) -> None:
        """Admit the parent, keep its split, dispatch every child."""
        deps = self.deps
        if not await self.intake.admit(Plan(envelope, None, None), delivery):
            return
        parts = await self._keep(envelope, split)
        moved = await deps.store.advance(
            envelope.task_id, "dispatched", by=deps.router_id, note=f"compound: {len(parts)} parts"
        )
        if moved is not None:
            await deps.emit(envelope, ("dispatched",), {"compound": split.as_dict()})
        self.split_count += 1
        logger.info(
            "task_id=%s carries %d intents: %s",
            envelope.task_id,
            len(parts),
            ", ".join(p["agent_id"] for p in parts),
        )
        explain = {"compound": {"parent_task_id": envelope.task_id, **split.as_dict()}}
        for number, part in enumerate(parts):
            await self._dispatch_child(envelope, number, part, delivery, explain)

    async def _keep(self, envelope: TaskEnvelope, split: Split) -> list[dict[str, Any]]:
        """Store the split (the first pass's wins) and return the parts to dispatch."""
        key = self.deps.store.keys.compound(envelope.task_id)
        parts = [
            {
                "agent_id": p.agent_id,
                "text": p.text,
                "confidence": round(p.confidence, 4),
                "task_id": child_task_id(envelope.task_id, i),
            }
            for i, p in enumerate(split.parts)
        ]
        redis = self.deps.store.redis
        ttl_s = int(self.deps.settings.max_task_lifetime_s * 2) + 60
        async with redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, "parts", orjson.dumps(parts))
            pipe.hsetnx(key, "envelope", encode(envelope))
            pipe.expire(key, ttl_s)
            pipe.hget(key, "parts")
            reply = await pipe.execute()
        stored: list[dict[str, Any]] = orjson.loads(reply[-1])
        return stored

    async def _dispatch_child(
        self,
        parent: TaskEnvelope,
        number: int,
        part: dict[str, Any],
        delivery: Delivery,
        explain: dict[str, Any],
    ) -> None:
        deps = self.deps
        child = TaskEnvelope(
            task_id=part["task_id"],
            trace_id=parent.trace_id,
            parent_task_id=parent.task_id,
            capability=part["text"],
            payload=parent.payload,
            context_ref=parent.context_ref,
            priority=parent.priority,
            timeout_ms=parent.timeout_ms,
            deadline_ms=parent.deadline_ms,
            created_ms=parent.created_ms,
            reply_to=self.queue,
            correlation_id=f"{parent.task_id}{CORRELATION_SEP}{number}",
            max_hops=parent.max_hops,
            hops=parent.hops,
            trajectory=list(parent.trajectory),
            target=part["agent_id"],
            source=parent.source,
            tags=dict(parent.tags),
        )
        raw = encode(child)
        plan = await self.chooser.plan(child, None)
        if plan.choice is not None:
            confidence = float(part["confidence"])
            route = RouteInfo(
                strategy="semantic",
                score=confidence,
                low_confidence=confidence < deps.settings.low_confidence_threshold,
            )
            choice = RouteChoice(plan.choice.agent_id, route, explain, learns=plan.choice.learns)
            plan = Plan(plan.envelope, choice, None)
        received = time.perf_counter()
        as_sent = Delivery(
            raw,
            {},
            "",
            redelivered=delivery.redelivered,
            received=received,
            user_id=delivery.user_id,
        )
        admitted = await self.intake.admit(plan, as_sent)
        if not admitted:
            return  # dispatched (or answered) by a pass before this one
        if plan.ending is not None:
            await self.endings.end(plan.envelope, raw, plan.ending)
            return
        assert plan.choice is not None
        await self.dispatcher.dispatch(
            plan.envelope, plan.choice, raw, received, seeded=admitted == "seeded"
        )
