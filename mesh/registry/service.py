"""`RegistryService`: the consumer of the registry queue (register, heartbeat, deregister).

All state is in Redis (`mesh.registry.lease`), so any number of registries may consume the
queue and a restarted one carries on where the last stopped. What a registry does:

- ``register`` / ``register.a2a``: grant a lease and a new fencing token, publish
  ``agent.up``, answer `RegistrationAck` to ``reply_to``. Under access control only from
  the agent's own user (`mesh.registry.admission`) and within the bounds of its claims
  (`mesh.registry.bounds`: priority_bonus, max_concurrency, one profile change per
  ``MESH_PROFILE_CHANGE_INTERVAL_S``).
- ``heartbeat``: queued and applied in batches (one Lua call per batch window), because
  heartbeats are most of the traffic. A heartbeat whose lease is gone (unknown instance,
  other token, down, or lapsed) is answered ``lease.lost`` on its ``reply_to``: the session
  re-registers. Renewals are published in bulk as ``agent.leases`` events.
- ``heartbeats``: a `HeartbeatBatch` (the beats of one worker connection that fell due
  together, `mesh.registry.beats`): each beat taken as a ``heartbeat``, checked one by one.
- ``deregister``: down at once, ``agent.down`` with reason ``deregistered``.
- a sweep claims lapsed leases and publishes ``agent.down`` (reason ``lease_expired``) at
  the first tick of ``sweep_interval_s`` after the earliest lease may have lapsed (Redis
  says when, with each sweep); the claim is atomic, so only one registry reports each.

The queue is consumed without acks: a registration lost with a crashing registry is
retried by its session, a lost heartbeat is superseded by the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractIncomingMessage
from pydantic import ValidationError

from mesh.connection import MeshConnection
from mesh.errors import NotStarted
from mesh.lifecycle import Lifecycle
from mesh.messaging import Publisher
from mesh.redis_health import RedisHealth
from mesh.registry import protocol
from mesh.registry.admission import Admission, Refusal
from mesh.registry.agent_card import registration_from_card
from mesh.registry.bounds import ProfileBounds
from mesh.registry.events import LeaseRow, down_event, leases_event, up_event
from mesh.registry.lease import SWEEP_BATCH, Beat, Grant, LeaseStore
from mesh.registry.state import load_state
from mesh.retrying import REDIS_FAILURES, TRANSIENT_ERRORS
from mesh.schemas import (
    Deregistration,
    Heartbeat,
    HeartbeatBatch,
    InvalidEnvelope,
    Registration,
    RegistrationAck,
    decode,
    encode,
    new_id,
)
from mesh.schemas.codec import dumps, loads, peek
from mesh.schemas.result import FieldProblem
from mesh.tasks import raise_if_cancelling
from mesh.topology import AGENT_HEADER, CONCURRENCY_HEADER, INSTANCE_HEADER
from mesh.wire import NoAck, Subscriber

if TYPE_CHECKING:
    from mesh.metrics.core import Metrics

logger = logging.getLogger(__name__)

#: how often a registry drops expired instance ids from the agents' sets
PRUNE_INTERVAL_S = 60.0

#: errors a registry survives (logged; the next message or tick tries again)
TRANSIENT = TRANSIENT_ERRORS
#: longest wait between two tries of heartbeats Redis failed to apply (doubling from
#: the batch window): at most this long after Redis is back, the leases are renewed
FLUSH_BACKOFF_MAX_S = 1.0


class RegistryService(Lifecycle):
    """One registry process. ``await start()``; ``await close()`` (idempotent)."""

    def __init__(
        self,
        conn: MeshConnection,
        *,
        batch_window_s: float = 0.1,
        max_batch: int = 500,
        metrics: Metrics | None = None,
    ) -> None:
        self.conn = conn
        #: None: nothing recorded (MESH_METRICS_PORT unset); else `stats` and
        #: `leases_live` are read at each scrape
        self.metrics = metrics
        #: live leases of the namespace, counted with each ``agent.leases`` event (metrics on)
        self.leases_live: int | None = None
        self.settings = conn.settings
        self.topology = conn.topology
        self.registry_id = new_id()[:8]
        #: heartbeats are held this long so one Lua call renews many leases
        self.batch_window_s = batch_window_s
        self.max_batch = max_batch
        #: renewals are published as one ``agent.leases`` event this often
        self.lease_event_s = max(
            self.settings.sweep_interval_s, min(1.0, self.settings.heartbeat_s / 2)
        )
        self.publisher = Publisher(conn)
        self._store: LeaseStore | None = None
        self._channel: AbstractChannel | None = None
        self.subscriber = Subscriber(
            conn,
            self.topology.registry,
            self._on_message,
            NoAck("registry messages"),
            prefetch=self.settings.prefetch,
        )
        self._beats: list[tuple[Beat, str | None]] = []
        #: whether the heartbeat flush and the sweep reach Redis (the health signal)
        self.redis_health = RedisHealth(f"registry {self.registry_id}", conn.outages.redis)
        self._beats_ready = asyncio.Event()
        self._renewed: dict[str, LeaseRow] = {}
        #: when (monotonic) the earliest lease may lapse: the sweep loop sweeps from then
        self._sweep_due = 0.0
        self._tasks: list[asyncio.Task[None]] = []
        #: counters, for `mesh registry -v` logs and the benchmark
        self.stats = {
            "registered": 0,
            "heartbeats": 0,
            # messages that carried heartbeats (one carries many: `mesh.registry.beats`)
            "beat_messages": 0,
            "lost": 0,
            "down": 0,
            "batches": 0,
            "refused": 0,
        }
        self.admission = Admission(conn.settings)
        #: under access control: what a registration may claim (`mesh.registry.bounds`)
        self.bounds = ProfileBounds(conn.settings)

    @property
    def store(self) -> LeaseStore:
        if self._store is None:
            raise NotStarted("RegistryService.start() was not awaited")
        return self._store

    async def start(self) -> None:
        """Declare the topology, start consuming, start the sweep."""
        if self._store is not None:
            return
        await self.publisher.start()
        await self.topology.declare(self.publisher.channel)
        self._store = LeaseStore(self.conn.redis, self.conn.keys, self.settings.lease_ttl_s)
        await self.subscriber.start()
        self._channel = self.subscriber.channel
        self._tasks = [
            asyncio.create_task(self._flush_loop(), name=f"registry-{self.registry_id}-beats"),
            asyncio.create_task(self._sweep_loop(), name=f"registry-{self.registry_id}-sweep"),
        ]
        if self.metrics is not None:
            self.metrics.watch("registry", self)
        logger.info(
            "registry %s consuming %s (lease_ttl_s=%s)",
            self.registry_id,
            self.topology.registry,
            self.settings.lease_ttl_s,
        )

    # --- messages ------------------------------------------------------------------------
    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        kind = message.type
        try:
            if kind == protocol.HEARTBEAT:
                self._on_heartbeat(message)
            elif kind == protocol.HEARTBEATS:
                self._on_heartbeats(message)
            elif kind in (protocol.REGISTER, protocol.REGISTER_A2A):
                await self._on_register(message)
            elif kind == protocol.DEREGISTER:
                await self._on_deregister(message)
            else:
                await self.publisher.dead_letter(
                    "invalid",
                    message.body,
                    details={"errors": [{"loc": "(type)", "msg": f"unknown type {kind!r}"}]},
                )
        except (*REDIS_FAILURES, *TRANSIENT) as exc:  # the sender tries again
            if not self.conn.outages.report(exc, what=f"a {kind} message"):
                logger.warning(
                    "registry %s: %s message not handled", self.registry_id, kind, exc_info=True
                )

    def _refused(
        self, message: AbstractIncomingMessage, what: str, agent_id: str, instance_id: str
    ) -> Refusal | None:
        """The admission check of `message` (None: accepted); a refusal is logged, counted."""
        refusal = self.admission.refusal(message.user_id, agent_id, instance_id)
        if refusal is not None:
            self.stats["refused"] += 1
            logger.warning(
                "registry %s: %s of instance %s refused: %s",
                self.registry_id,
                what,
                instance_id,
                refusal.message,
            )
        return refusal

    def _on_heartbeat(self, message: AbstractIncomingMessage) -> None:
        try:
            hb = Heartbeat.model_validate_json(message.body)
        except ValidationError:
            logger.warning("registry %s: invalid heartbeat dropped", self.registry_id)
            return
        self.stats["beat_messages"] += 1
        self._take_beat(message, hb, message.reply_to)

    def _on_heartbeats(self, message: AbstractIncomingMessage) -> None:
        """A `HeartbeatBatch`: each beat taken as a single heartbeat naming its reply_to."""
        try:
            batch = HeartbeatBatch.model_validate_json(message.body)
        except ValidationError:
            logger.warning("registry %s: invalid heartbeat batch dropped", self.registry_id)
            return
        self.stats["beat_messages"] += 1
        for hb in batch.beats:
            self._take_beat(message, hb, hb.reply_to or None)

    def _take_beat(
        self, message: AbstractIncomingMessage, hb: Heartbeat, reply_to: str | None
    ) -> None:
        if self._refused(message, "heartbeat", hb.agent_id, hb.instance_id):
            return
        concurrency = hb.max_concurrency
        if self.admission.enabled:
            concurrency = self.bounds.concurrency(concurrency)
        beat = Beat(hb.agent_id, hb.instance_id, hb.token, hb.in_flight, concurrency, hb.stuck)
        self._beats.append((beat, reply_to))
        self._beats_ready.set()

    async def _on_register(self, message: AbstractIncomingMessage) -> None:
        limit = self.settings.max_registration_bytes
        if self.admission.enabled and len(message.body) > limit:
            self.stats["refused"] += 1
            await self._refuse(
                message, "registration_too_large", f"a registration is at most {limit} bytes"
            )
            return
        try:
            registration = self._registration(message)
        except InvalidEnvelope as exc:
            await self._refuse(message, "invalid_registration", str(exc), exc.as_details())
            await self.publisher.dead_letter("invalid", exc.raw, details=exc.as_details())
            return
        agent_id, instance_id = registration.agent_id, registration.instance_id
        refusal = self._refused(message, "registration", agent_id, instance_id)
        if refusal is None and self.admission.enabled:
            refusal = await self._out_of_bounds(registration)
        if refusal is not None:
            await self._refuse(message, refusal.code, refusal.message, ids=(agent_id, instance_id))
            return
        grant = await self.store.grant(
            registration,
            session=message.reply_to or "",
            guard=self.admission.enabled,
            max_instances=self.settings.max_instances_per_agent,
        )
        if not isinstance(grant, Grant):
            self.stats["refused"] += 1
            if grant == "in_use":
                code, text = (
                    "instance_in_use",
                    (
                        f"instance {instance_id!r} is held by a live session; it is free once "
                        "that session deregisters or its lease lapses"
                    ),
                )
            else:
                code, text = (
                    "too_many_instances",
                    (
                        f"agent {agent_id!r} has {self.settings.max_instances_per_agent} live "
                        "instances already (MESH_MAX_INSTANCES_PER_AGENT)"
                    ),
                )
            logger.warning(
                "registry %s: registration of instance %s refused: %s",
                self.registry_id,
                instance_id,
                text,
            )
            await self._refuse(message, code, text, ids=(agent_id, instance_id))
            return
        self.stats["registered"] += 1
        await self.publisher.emit(
            up_event(registration, grant.token, grant.now_ms, grant.lease_expires_ms)
        )
        ack = RegistrationAck(
            agent_id=registration.agent_id,
            instance_id=registration.instance_id,
            token=grant.token,
            lease_ttl_s=self.settings.lease_ttl_s,
            heartbeat_s=self.settings.heartbeat_s,
        )
        await self._reply(message, protocol.ACK, encode(ack), (agent_id, instance_id))
        logger.info(
            "registered agent=%s instance=%s token=%d",
            registration.agent_id,
            registration.instance_id,
            grant.token,
        )

    async def _out_of_bounds(self, registration: Registration) -> Refusal | None:
        """The bounds of an agent's own claims: priority_bonus, max_concurrency, and how
        soon its profile may change (read here: the agent's current one, Redis' clock).
        Two registries may both let one change through at the same moment; not more."""
        refusal = self.bounds.refusal(registration)
        if refusal is None:
            pipe = self.conn.redis.pipeline(transaction=False)
            pipe.hmget(self.conn.keys.agent(registration.agent_id), "registration", "updated_ms")
            pipe.time()
            (raw, updated), (seconds, micros) = await pipe.execute()
            current = None
            if raw is not None:
                try:
                    current = Registration.model_validate_json(raw)
                except ValidationError:
                    current = None  # an older shape: the new profile replaces it
            refusal = self.bounds.change_refusal(
                registration,
                current,
                None if updated is None else int(updated),
                int(seconds) * 1000 + int(micros) // 1000,
            )
        if refusal is not None:
            self.stats["refused"] += 1
            logger.warning(
                "registry %s: registration of instance %s refused: %s",
                self.registry_id,
                registration.instance_id,
                refusal.message,
            )
        return refusal

    def _registration(self, message: AbstractIncomingMessage) -> Registration:
        body = message.body
        if message.type == protocol.REGISTER:
            return decode(Registration, body, max_payload_bytes=self.settings.max_payload_bytes)
        headers = message.headers or {}
        instance_id = headers.get(INSTANCE_HEADER)
        if not isinstance(instance_id, str | bytes):
            raise _invalid(body, INSTANCE_HEADER, "header is required")
        agent_id = headers.get(AGENT_HEADER)
        concurrency = headers.get(CONCURRENCY_HEADER, 4)
        try:
            card = loads(body)
            return registration_from_card(
                card,
                instance_id=_text(instance_id),
                agent_id=None if agent_id is None else _text(agent_id),
                max_concurrency=int(_text(concurrency)),
            )
        except ValidationError as exc:
            problems = [
                (".".join(str(p) for p in e["loc"]) or "(body)", e["msg"])
                for e in exc.errors(include_url=False)
            ]
            raise _invalid(body, *problems[0], more=problems[1:]) from None
        except (ValueError, TypeError) as exc:
            raise _invalid(body, "(body)", f"not an A2A Agent Card: {exc}") from None

    async def _on_deregister(self, message: AbstractIncomingMessage) -> None:
        try:
            goodbye = decode(Deregistration, message.body)
        except InvalidEnvelope as exc:
            await self.publisher.dead_letter("invalid", exc.raw, details=exc.as_details())
            return
        if self._refused(message, "deregistration", goodbye.agent_id, goodbye.instance_id):
            return
        released, last_hb, expires = await self.store.release(goodbye.instance_id, goodbye.token)
        if not released:
            return
        self.stats["down"] += 1
        self._renewed.pop(goodbye.instance_id, None)
        await self.publisher.emit(
            down_event(
                goodbye.agent_id,
                goodbye.instance_id,
                goodbye.token,
                "deregistered",
                lease_expires_ms=expires,
                last_heartbeat_ms=last_hb,
            )
        )
        logger.info("deregistered agent=%s instance=%s", goodbye.agent_id, goodbye.instance_id)

    async def _refuse(
        self,
        message: AbstractIncomingMessage,
        code: str,
        text: str,
        details: Any = None,
        ids: tuple[str, str] | None = None,
    ) -> None:
        body = {"code": code, "message": text, **({"details": details} if details else {})}
        await self._reply(message, protocol.ERROR, dumps(body), ids)

    async def _reply(
        self,
        message: AbstractIncomingMessage,
        kind: str,
        body: bytes,
        ids: tuple[str, str] | None = None,
    ) -> None:
        """Answer a registration: to its reply_to queue without access control; under it
        through the sessions exchange, keyed by agent and instance (the registry gets no
        write on the default exchange). A body that did not decode is answered under the
        ids it names, if any.
        """
        if ids is None:
            agent_id, instance_id = (
                peek(message.body, "agent_id"),
                peek(message.body, "instance_id"),
            )
            if agent_id and instance_id:
                ids = (agent_id[:128], instance_id[:128])
        answer = aio_pika.Message(
            body, content_type=protocol.JSON, type=kind, correlation_id=message.correlation_id
        )
        await self._answer(answer, ids, message.reply_to)

    async def _answer(
        self, answer: aio_pika.Message, ids: tuple[str, str] | None, reply_to: str | None
    ) -> None:
        if self._channel is None:
            return
        if reply_to and not self.admission.enabled:
            # development: the reply_to queue, as any AMQP RPC (an A2A card from a plain
            # client); the mesh's sessions also bind the sessions exchange
            exchange, key = self._channel.default_exchange, reply_to
        elif ids is not None:
            exchange = await self.publisher.exchange(self.topology.sessions, fast=True)
            key = self.topology.session_key(*ids)
        else:
            return
        await self.publisher.send(exchange, answer, key, mandatory=False)

    # --- heartbeats ----------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        """Flush every batch window; while Redis fails, retry the kept heartbeats with a
        doubling pause (at most `FLUSH_BACKOFF_MAX_S`). Nothing ends the loop but a cancel."""
        pause = self.batch_window_s
        while True:
            raise_if_cancelling()
            await self._beats_ready.wait()
            await asyncio.sleep(pause)
            try:
                applied = await self.flush_heartbeats()
            except TRANSIENT as exc:  # a notice or event the broker did not take
                if not self.conn.outages.report(exc, what="heartbeat answers"):
                    logger.warning("registry %s: heartbeat answers not sent", self.registry_id)
                applied = True
            except Exception:  # a bug must not stop the renewals: logged, next round
                logger.exception("registry %s: heartbeat flush failed", self.registry_id)
                applied = True
            if applied:
                pause = self.batch_window_s
            else:
                pause = min(pause * 2, FLUSH_BACKOFF_MAX_S)
                self._beats_ready.set()  # the kept heartbeats: try again

    async def flush_heartbeats(self) -> bool:
        """Apply every queued heartbeat now (one Redis call per `max_batch`).

        When Redis fails a batch (away, BUSY with a script, any error) its heartbeats stay
        queued, the newest of each instance, and False is returned: the next flush applies
        them, so a lease whose holder beat in time is renewed once Redis answers again.
        """
        self._beats_ready.clear()
        while self._beats:
            batch, self._beats = self._beats[: self.max_batch], self._beats[self.max_batch :]
            try:
                renewals = await self.store.renew([b for b, _ in batch])
            except (*REDIS_FAILURES, *TRANSIENT) as exc:
                self._beats = _newest_of_each([*batch, *self._beats])
                self.redis_health.failed("heartbeats", exc)
                return False
            self.redis_health.ok()
            self.stats["batches"] += 1
            self.stats["heartbeats"] += len(batch)
            for (beat, reply_to), r in zip(batch, renewals, strict=True):
                if r.code == "renewed":
                    self._renewed[beat.instance_id] = (
                        beat.instance_id,
                        beat.agent_id,
                        beat.token,
                        r.lease_expires_ms,
                        beat.in_flight,
                        beat.max_concurrency,
                    )
                    continue
                self.stats["lost"] += 1
                if r.code == "lapsed":
                    await self._report_down(
                        beat.agent_id,
                        beat.instance_id,
                        beat.token,
                        r.lease_expires_ms,
                        r.last_heartbeat_ms,
                    )
                await self._lease_lost(beat, reply_to)
        return True

    async def _lease_lost(self, beat: Beat, reply_to: str | None) -> None:
        if self._channel is None:
            return
        logger.info(
            "lease lost agent=%s instance=%s token=%d", beat.agent_id, beat.instance_id, beat.token
        )
        notice = aio_pika.Message(
            protocol.lease_lost_body(beat.instance_id, beat.token),
            content_type=protocol.JSON,
            type=protocol.LEASE_LOST,
        )
        await self._answer(notice, (beat.agent_id, beat.instance_id), reply_to)

    # --- sweep ---------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        """Tick every `sweep_interval_s`, sweeping once a lease may have lapsed (`sweep`);
        any failure is logged and the next tick sweeps again. While Redis fails, heartbeats
        kept from a failed flush are applied before any lapse is claimed (a lease its holder
        renewed in time is not swept)."""
        last_leases = last_prune = time.monotonic()
        while True:
            raise_if_cancelling()
            await asyncio.sleep(self.settings.sweep_interval_s)
            try:
                behind = not self.redis_health.healthy and bool(self._beats)
                if behind and not await self.flush_heartbeats():
                    continue
                if time.monotonic() >= self._sweep_due or not self.redis_health.healthy:
                    await self.sweep()
                    self.redis_health.ok()
                if time.monotonic() - last_leases >= self.lease_event_s:
                    last_leases = time.monotonic()
                    await self.publish_leases()
                    if self.metrics is not None:
                        self.leases_live = int(await self.conn.redis.zcard(self.conn.keys.leases()))
                if time.monotonic() - last_prune >= PRUNE_INTERVAL_S:
                    # forget instance ids whose hash expired (readers under access
                    # control may not write the sets: the registry keeps them small)
                    last_prune = time.monotonic()
                    await load_state(self.conn.redis, self.conn.keys, prune=True)
            except REDIS_FAILURES as exc:
                self.redis_health.failed("sweep", exc)
            except TRANSIENT as exc:  # an event the broker did not take
                if not self.conn.outages.report(exc, what="the sweep"):
                    logger.warning("registry %s: sweep failed", self.registry_id, exc_info=True)
            except Exception:  # a bug must not stop the sweep: logged, next tick
                logger.exception("registry %s: sweep failed", self.registry_id)

    async def sweep(self) -> int:
        """Claim every lapsed lease and publish its ``agent.down``; returns how many.

        The sweep loop calls it again once the earliest lease left may have lapsed (the
        next tick after it), not every tick: idle, a registry makes no Redis call a tick
        whatever the number of instances. No lease granted meanwhile lapses sooner (each
        gets the whole TTL; a registry of another TTL sweeps its own), renewals only
        postpone it, and a heartbeat that comes after its lease lapsed is claimed by the
        renewal itself.
        """
        claimed = 0
        while True:
            started = time.monotonic()
            lapses = await self.store.sweep()
            next_in_ms = self.store.next_lapse_in_ms
            wait_s = self.settings.lease_ttl_s if next_in_ms is None else next_in_ms / 1000
            self._sweep_due = started + min(wait_s, self.settings.lease_ttl_s)
            for lapse in lapses:
                await self._report_down(
                    lapse.agent_id,
                    lapse.instance_id,
                    lapse.token,
                    lapse.lease_expires_ms,
                    lapse.last_heartbeat_ms,
                )
            claimed += len(lapses)
            if len(lapses) < SWEEP_BATCH:
                return claimed

    async def _report_down(
        self, agent_id: str, instance_id: str, token: int, expires: int, last_hb: int
    ) -> None:
        self.stats["down"] += 1
        self._renewed.pop(instance_id, None)
        logger.warning(
            "lease lapsed agent=%s instance=%s token=%d last_heartbeat_ms=%d",
            agent_id,
            instance_id,
            token,
            last_hb,
        )
        await self.publisher.emit(
            down_event(
                agent_id,
                instance_id,
                token,
                "lease_expired",
                lease_expires_ms=expires,
                last_heartbeat_ms=last_hb,
            )
        )

    async def publish_leases(self) -> None:
        """Publish the renewals since the last call as one ``agent.leases`` event."""
        if not self._renewed:
            return
        rows, self._renewed = list(self._renewed.values()), {}
        await self.publisher.emit(leases_event(rows))

    # --- shutdown ------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop consuming, apply what is queued, stop the sweep, close channels. Idempotent."""
        if self.metrics is not None:
            self.metrics.unwatch("registry", self)
        await self.subscriber.stop()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._store is not None and self._beats:
            with contextlib.suppress(*TRANSIENT):
                await self.flush_heartbeats()
        self._channel = None
        await self.subscriber.close()
        await self.publisher.close()
        self._store = None


def _newest_of_each(beats: list[tuple[Beat, str | None]]) -> list[tuple[Beat, str | None]]:
    """The last heartbeat of each instance in `beats` (later is newer), in that order."""
    newest = {beat.instance_id: (beat, reply_to) for beat, reply_to in beats}
    return list(newest.values())


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _invalid(
    body: bytes, loc: str, msg: str, more: list[tuple[str, str]] | None = None
) -> InvalidEnvelope:
    problems = [FieldProblem(loc=loc, msg=msg[:500])]
    problems += [FieldProblem(loc=lo, msg=m[:500]) for lo, m in (more or [])]
    return InvalidEnvelope(problems, body, "AgentCard")
