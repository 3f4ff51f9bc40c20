"""`AgentSnapshot`: a router's local view of the live agents, kept fresh from events.

``start()`` binds an exclusive, auto-delete queue (`Topology.snapshot_queue`) to the events
exchange for ``agent.*``, then loads everything from Redis (so a router started after the
agents sees them), then resyncs from Redis every ``snapshot_resync_s``; while resyncs find
nothing the events missed, the pause doubles up to `RESYNC_BACKOFF` times that (an idle
mesh reads its whole registry once a minute, not six times). Between resyncs it
applies ``agent.up`` (registration included: no Redis read), ``agent.down`` and the bulk
``agent.leases`` renewals (leases and loads).

Reads are synchronous and decide liveness at read time from ``lease_expires_ms``: an
instance whose lease has lapsed is never offered, even before its ``agent.down`` arrives.
An agent whose every instance is down is still known (the registry keeps a down instance's
record for an hour): `awaited` says whether its last lease ended within
``agent_return_window_s``, so its tasks wait in its queue for a restart.
(The lease end is by Redis' clock; the snapshot compares it with its own, so hosts must
keep their clocks in sync, as NTP does.)

Change hooks: ``on_change(fn)`` registers ``fn(agent_id)``, called when an agent's
registration or set of instances changes (up, down, resync), not on lease renewals or load
updates (read those at scoring time). ``version`` counts such changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from pydantic import ValidationError
from redis.exceptions import RedisError

from mesh.access.trust import EventTrust
from mesh.connection import MeshConnection, process_queue_id
from mesh.lifecycle import Lifecycle
from mesh.registry.events import (
    AGENT_DOWN,
    AGENT_EVENTS,
    AGENT_LEASES,
    AGENT_UP,
    instance_from_up,
    lease_rows,
)
from mesh.registry.state import AgentState, load_state
from mesh.schemas import Event, InvalidEnvelope, now_ms
from mesh.tasks import raise_if_cancelling
from mesh.wire import NoAck, Subscriber, each_event

logger = logging.getLogger(__name__)

#: the pause between resyncs grows to at most this many ``snapshot_resync_s``
RESYNC_BACKOFF = 6

ChangeHook = Callable[[str], None]


class AgentSnapshot(Lifecycle):
    """Live agents with their capability data, load, instances and tokens."""

    def __init__(self, conn: MeshConnection, *, snapshot_id: str | None = None) -> None:
        self.conn = conn
        self.snapshot_id = snapshot_id or process_queue_id()
        self.version = 0
        self._agents: dict[str, AgentState] = {}
        #: monotonic time each instance was last changed by an event (resync merge rule)
        self._touched: dict[str, float] = {}
        self._hooks: list[ChangeHook] = []
        #: under access control only a registry's agent events count
        self.trust = EventTrust(conn.settings)
        self.subscriber = Subscriber(
            conn,
            self._declare,
            each_event(self._on_event, unreadable=self._unreadable),
            NoAck("agent events"),
            prefetch=256,
        )
        self._resync_task: asyncio.Task[None] | None = None

    # --- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        """Subscribe to ``agent.*``, load from Redis, start the periodic resync."""
        if self.subscriber.started:
            return
        await self.subscriber.start()
        await self.resync()
        self._resync_task = asyncio.create_task(
            self._resync_loop(), name=f"snapshot-{self.snapshot_id}"
        )

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        topo = self.conn.topology
        await topo.declare(channel)
        queue = await channel.declare_queue(
            topo.snapshot_queue(self.snapshot_id), durable=False, exclusive=True, auto_delete=True
        )
        await queue.bind(topo.events, routing_key=AGENT_EVENTS)
        return queue

    async def close(self) -> None:
        """Stop following events; safe to call twice."""
        task, self._resync_task = self._resync_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.subscriber.close()

    def on_change(self, hook: ChangeHook) -> None:
        """Call ``hook(agent_id)`` whenever that agent's registration or instances change."""
        self._hooks.append(hook)

    # --- reads -------------------------------------------------------------------------------
    def live_agents(self, at_ms: int | None = None) -> list[AgentState]:
        """Agents with at least one live instance now (lapsed leases excluded)."""
        now = now_ms() if at_ms is None else at_ms
        return [a for a in self._agents.values() if a.registration is not None and a.is_live(now)]

    def agent(self, agent_id: str) -> AgentState | None:
        """The agent as known (live or not); check `AgentState.is_live` before routing."""
        return self._agents.get(agent_id)

    def is_live(self, agent_id: str, at_ms: int | None = None) -> bool:
        found = self._agents.get(agent_id)
        return found is not None and found.is_live(now_ms() if at_ms is None else at_ms)

    def all_agents(self) -> list[AgentState]:
        return list(self._agents.values())

    def awaited(self, agent_id: str, at_ms: int | None = None) -> bool:
        """Has `agent_id` no live instance now but one whose lease ended within
        ``agent_return_window_s`` (`AgentState.awaited`: its tasks wait for it)?"""
        found = self._agents.get(agent_id)
        window_ms = int(self.conn.settings.agent_return_window_s * 1000)
        return found is not None and found.awaited(now_ms() if at_ms is None else at_ms, window_ms)

    # --- events ------------------------------------------------------------------------------
    def _unreadable(self, message: AbstractIncomingMessage, exc: InvalidEnvelope) -> None:
        logger.warning(
            "snapshot %s: bad %s event ignored: %s", self.snapshot_id, message.routing_key, exc
        )

    async def _on_event(self, event: Event, message: AbstractIncomingMessage) -> None:
        try:
            if not self.trust.believes(message.user_id, event):
                logger.warning(
                    "snapshot %s: %s from user %r ignored (only a registry's count)",
                    self.snapshot_id,
                    event.type,
                    message.user_id,
                )
                return
            if event.type == AGENT_LEASES:
                self._apply_leases(event)
            elif event.type == AGENT_UP:
                self._apply_up(event)
            elif event.type == AGENT_DOWN:
                self._apply_down(event)
        except (ValidationError, KeyError, ValueError, TypeError):
            logger.warning(
                "snapshot %s: bad %s event ignored",
                self.snapshot_id,
                message.routing_key,
                exc_info=True,
            )

    def _apply_up(self, event: Event) -> None:
        registration, inst = instance_from_up(event)
        agent = self._agents.setdefault(inst.agent_id, AgentState(inst.agent_id))
        known = agent.instances.get(inst.instance_id)
        if known is not None and known.token > inst.token:
            return
        agent.registration = registration
        agent.instances[inst.instance_id] = inst
        self._touched[inst.instance_id] = time.monotonic()
        self._changed(inst.agent_id)

    def _apply_down(self, event: Event) -> None:
        agent = self._agents.get(event.agent_id or "")
        known = agent.instances.get(event.instance_id or "") if agent else None
        if agent is None or known is None or known.token > int(event.data["token"]):
            return
        agent.instances[known.instance_id] = replace(
            known, status="down", down_reason=event.data.get("reason"), down_ms=event.ts_ms
        )
        self._touched[known.instance_id] = time.monotonic()
        self._changed(agent.agent_id)

    def _apply_leases(self, event: Event) -> None:
        # a renewal sets its lease to end lease_ttl after the registry took the heartbeat
        ttl_ms = self.conn.settings.lease_ttl_ms
        for iid, agent_id, token, expires, in_flight, max_conc in lease_rows(event):
            agent = self._agents.get(agent_id)
            known = agent.instances.get(iid) if agent else None
            if agent is None or known is None or known.token != token or known.status != "up":
                continue
            if expires < known.lease_expires_ms:
                continue
            agent.instances[iid] = replace(
                known,
                lease_expires_ms=expires,
                last_heartbeat_ms=expires - ttl_ms,
                in_flight=in_flight,
                max_concurrency=max_conc,
            )

    # --- resync ------------------------------------------------------------------------------
    async def _resync_loop(self) -> None:
        base = pause = self.conn.settings.snapshot_resync_s
        while True:
            raise_if_cancelling()
            await asyncio.sleep(pause)
            try:
                found = await self.resync()
            except (RedisError, OSError, aio_pika.exceptions.AMQPError) as exc:
                if not self.conn.outages.report(exc, what="the agent snapshot's resync"):
                    logger.warning("snapshot %s: resync failed", self.snapshot_id, exc_info=True)
                found = True
            else:
                self.conn.outages.redis.back()
            pause = base if found else min(pause * 2, base * RESYNC_BACKOFF)

    async def resync(self) -> bool:
        """Reload from Redis and merge: Redis wins unless an event is newer than the read.
        Returns whether it changed an agent (something the events had not brought)."""
        started = time.monotonic()
        # under access control a snapshot reads only: the registry prunes the sets
        prune = not self.conn.settings.access_control
        fresh = await load_state(self.conn.redis, self.conn.keys, prune=prune)
        changed: set[str] = set()
        for agent_id in set(self._agents) | set(fresh):
            old = self._agents.get(agent_id)
            new = fresh.get(agent_id)
            merged = self._merge(old, new, started)
            if merged is None:
                self._agents.pop(agent_id, None)
            else:
                self._agents[agent_id] = merged
            if _shape(old) != _shape(merged):
                changed.add(agent_id)
        for agent_id in sorted(changed):
            self._changed(agent_id)
        return bool(changed)

    def _merge(
        self, old: AgentState | None, new: AgentState | None, started: float
    ) -> AgentState | None:
        if old is None:
            return new
        result = AgentState(old.agent_id, (new.registration if new else None) or old.registration)
        for iid in set(old.instances) | set(new.instances if new else {}):
            mine = old.instances.get(iid)
            theirs = new.instances.get(iid) if new else None
            recent = self._touched.get(iid, 0.0) >= started
            if theirs is None:
                if mine is not None and recent:
                    result.instances[iid] = mine
                continue
            if mine is not None and (
                mine.token > theirs.token or (recent and mine.token == theirs.token)
            ):
                result.instances[iid] = mine
            else:
                result.instances[iid] = theirs
        return result if result.instances or result.registration else None

    def _changed(self, agent_id: str) -> None:
        self.version += 1
        for hook in self._hooks:
            try:
                hook(agent_id)
            except Exception:  # a router's hook must not stop the event feed; logged
                logger.exception("snapshot hook %r failed for agent=%s", hook, agent_id)


def _shape(agent: AgentState | None) -> object:
    """What a change hook cares about: registration and each instance's token and status."""
    if agent is None:
        return None
    return (
        agent.registration,
        frozenset((i.instance_id, i.token, i.status) for i in agent.instances.values()),
    )
