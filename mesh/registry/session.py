"""`RegistrySession`: a worker instance's membership (the `Membership` protocol, for real).

- ``start(load)``: declare an exclusive session queue (`Topology.session_queue`), register
  over the registry queue and wait for the `RegistrationAck` there, retrying with backoff
  (tenacity) while no registry answers; then heartbeat every ``heartbeat_s`` with
  ``load()`` in flight.
- Lost lease: the registry answers a heartbeat whose lease is gone (lapsed, swept, or
  superseded) with ``lease.lost`` on the session queue; a `check()` that finds the current
  token stale does the same locally. Either way the session re-registers and gets a new,
  higher token; the old one stays refused, so work begun under it cannot commit.
- ``check(token)``: `fencing.check_token` against Redis (atomic, Redis' clock).
- ``stop()``: stop heartbeating, deregister (down at once), close. Safe to call twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage, AbstractQueue
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_after_delay,
    stop_never,
    wait_exponential_jitter,
)

from mesh.connection import MeshConnection
from mesh.errors import NotStarted, RegistryError, RegistryUnavailable, StaleFencingToken
from mesh.messaging import login_of
from mesh.registry import fencing, protocol
from mesh.registry.beats import BeatBatcher
from mesh.schemas import (
    Deregistration,
    Heartbeat,
    Registration,
    RegistrationAck,
    decode,
    new_id,
    now_ms,
)
from mesh.schemas.codec import loads
from mesh.tasks import raise_if_cancelling
from mesh.wire import NoAck, Subscriber

logger = logging.getLogger(__name__)


class RegistrySession:
    """Registration, heartbeats and fencing of one worker instance."""

    def __init__(
        self,
        conn: MeshConnection,
        registration: Registration,
        *,
        attempt_timeout_s: float = 2.0,
        register_timeout_s: float | None = None,
    ) -> None:
        """`register_timeout_s`: give up registering after this long (None: keep trying)."""
        self.conn = conn
        self.registration = registration
        self.agent_id = registration.agent_id
        self.instance_id = registration.instance_id
        self.settings = conn.settings
        self.attempt_timeout_s = attempt_timeout_s
        #: stamped as ``user_id`` on every message: the registry checks it under access control
        self.login = login_of(conn.settings)
        self.register_timeout_s = register_timeout_s
        self._token: int | None = None
        self._load: Callable[[], int] = lambda: 0
        self._stuck: Callable[[], int] = lambda: 0
        self._replies = Subscriber(conn, self._declare, self._on_reply, NoAck("registry answers"))
        self._started = False
        self._registry_ex: AbstractExchange | None = None
        self._queue: AbstractQueue | None = None
        self._pending: dict[str, asyncio.Future[RegistrationAck]] = {}
        self._heartbeat_task: asyncio.Task[None] | None = None
        self._relogin_task: asyncio.Task[None] | None = None
        self._beating = asyncio.Event()
        self._beating.set()
        self._stopped = False
        #: how many times the session registered (1 + re-registrations after lost leases)
        self.registrations = 0

    # --- Membership ------------------------------------------------------------------------
    @property
    def token(self) -> int:
        if self._token is None:
            raise NotStarted("RegistrySession.start() was not awaited (no fencing token yet)")
        return self._token

    async def start(self, load: Callable[[], int], stuck: Callable[[], int] | None = None) -> None:
        """Register (retrying while no registry answers), then heartbeat `load()` and
        `stuck()` (tasks in flight that will not settle by themselves)."""
        if self._started:
            return
        self._started = True
        self._load = load
        self._stuck = stuck or (lambda: 0)
        self._stopped = False
        await self._replies.start()
        self._queue = self._replies.queue
        await self._register()
        self._heartbeat_task = asyncio.create_task(
            self._heartbeat_loop(), name=f"heartbeat-{self.instance_id}"
        )

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        """The session queue, on the channel registrations and heartbeats are sent on."""
        await self.conn.topology.declare(channel)
        self._registry_ex = await channel.get_exchange(self.conn.topology.registry, ensure=False)
        topology = self.conn.topology
        queue = await channel.declare_queue(
            topology.session_queue(self.instance_id),
            durable=False,
            exclusive=True,
            auto_delete=True,
        )
        # the registry answers through the sessions exchange, keyed by agent and instance
        # (never through the default exchange, which would let it write any queue)
        await queue.bind(
            topology.sessions, routing_key=topology.session_key(self.agent_id, self.instance_id)
        )
        return queue

    async def check(self, token: int) -> None:
        """Raise `StaleFencingToken` unless `token` is this instance's current, live token."""
        try:
            await fencing.check_token(
                self.conn.redis, self.conn.keys, self.agent_id, self.instance_id, token
            )
        except StaleFencingToken:
            if token == self._token:
                self._lease_lost(token, "fencing check")
            raise

    async def renew(self, stale_token: int, timeout_s: float) -> bool:
        """Re-register once for every task that found `stale_token` refused, and wait up to
        `timeout_s` for the new token: the tasks then claim again instead of going back to
        the broker all at once (a redelivery storm when many leases lapsed together)."""
        if self._token != stale_token:
            return True
        self._lease_lost(stale_token, "claim refused")
        task = self._relogin_task
        if task is not None and not task.done():
            with contextlib.suppress(TimeoutError, RegistryError):
                await asyncio.wait_for(asyncio.shield(task), timeout_s)
        return self._token != stale_token

    async def stop(self) -> None:
        """Stop heartbeating and deregister (the runtime drained in-flight work before)."""
        if self._stopped:
            return
        self._stopped = True
        for task in (self._heartbeat_task, self._relogin_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._heartbeat_task = self._relogin_task = None
        if self._token is not None and self._registry_ex is not None:
            goodbye = Deregistration(
                agent_id=self.agent_id, instance_id=self.instance_id, token=self._token
            )
            with contextlib.suppress(aio_pika.exceptions.AMQPError, RuntimeError):
                await self._send(protocol.deregister_message(goodbye))
        for fut in self._pending.values():
            fut.cancel()
        self._pending.clear()
        self._registry_ex = self._queue = None
        self._started = False
        await self._replies.close()
        logger.info("session %s deregistered", self.instance_id)

    # --- partition drills --------------------------------------------------------------------
    def suspend_heartbeats(self) -> None:
        """Stop sending heartbeats (simulates a partition: the lease will lapse)."""
        self._beating.clear()

    def resume_heartbeats(self) -> None:
        """Send heartbeats again; a lapsed lease is then reported lost and re-registered."""
        self._beating.set()

    # --- registration ------------------------------------------------------------------------
    async def _register(self) -> None:
        stop = (
            stop_never
            if self.register_timeout_s is None
            else stop_after_delay(self.register_timeout_s)
        )
        retrying = AsyncRetrying(
            stop=stop,
            wait=wait_exponential_jitter(multiplier=0.2, max=5.0, jitter=0.2),
            retry=retry_if_exception_type(RegistryUnavailable),
            before_sleep=self._log_retry,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                ack = await self._register_once()
        self._token = ack.token
        self.registrations += 1
        logger.info(
            "registered agent=%s instance=%s token=%d", self.agent_id, self.instance_id, ack.token
        )

    async def _register_once(self) -> RegistrationAck:
        if self._registry_ex is None or self._queue is None:
            raise NotStarted("RegistrySession.start() was not awaited")
        correlation_id = new_id()
        fut: asyncio.Future[RegistrationAck] = asyncio.get_running_loop().create_future()
        self._pending[correlation_id] = fut
        try:
            await self._send(
                protocol.register_message(
                    self.registration,
                    reply_to=self._queue.name,
                    correlation_id=correlation_id,
                    expiration_s=self.attempt_timeout_s,
                )
            )
            async with asyncio.timeout(self.attempt_timeout_s):
                return await fut
        except TimeoutError:
            raise RegistryUnavailable(
                f"no registry answered within {self.attempt_timeout_s}s; "
                "is `mesh registry` running?"
            ) from None
        finally:
            self._pending.pop(correlation_id, None)

    def _log_retry(self, state: RetryCallState) -> None:
        logger.warning(
            "registration of %s: attempt %d got no answer; retrying in %.1fs",
            self.instance_id,
            state.attempt_number,
            state.next_action.sleep if state.next_action else 0.0,
        )

    async def _on_reply(self, message: AbstractIncomingMessage) -> None:
        if message.type == protocol.LEASE_LOST:
            notice = loads(message.body)
            self._lease_lost(int(notice["token"]), "registry notice")
            return
        fut = self._pending.get(message.correlation_id or "")
        if fut is None or fut.done():
            return
        if message.type == protocol.ACK:
            fut.set_result(decode(RegistrationAck, message.body))
        else:
            fut.set_exception(RegistryError(f"registration refused: {message.body.decode()}"))

    def _lease_lost(self, token: int, how: str) -> None:
        """Re-register once (single flight) when the current token's lease is gone."""
        if self._stopped or token != self._token:
            return
        if self._relogin_task is not None and not self._relogin_task.done():
            return
        logger.warning(
            "lease lost agent=%s instance=%s token=%d (%s); re-registering",
            self.agent_id,
            self.instance_id,
            token,
            how,
        )
        self._relogin_task = asyncio.create_task(self._register())

    # --- heartbeats -------------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        interval = self.settings.heartbeat_s
        loop = asyncio.get_running_loop()
        next_at = loop.time() + interval
        while True:
            raise_if_cancelling()
            await asyncio.sleep(max(0.0, next_at - loop.time()))
            if not self._beating.is_set():
                await self._beating.wait()
            try:
                due = await self._beat()
            except (aio_pika.exceptions.AMQPError, RuntimeError, ConnectionError) as exc:
                # the robust connection reconnects; the next beat tries again
                if not self.conn.outages.report(exc, what=f"heartbeats of {self.instance_id}"):
                    logger.warning("heartbeat of %s not sent: %r", self.instance_id, exc)
                due = None
            else:
                self.conn.outages.broker.back()
            next_at = loop.time() + interval if due is None else due

    async def _beat(self) -> float | None:
        """Send one heartbeat with the others of this connection that fall due with it
        (`BeatBatcher`); returns when the next one is due (loop clock), None: not sent."""
        if self._registry_ex is None or self._queue is None or self._token is None:
            return None
        beat = Heartbeat(
            agent_id=self.agent_id,
            instance_id=self.instance_id,
            token=self._token,
            in_flight=max(0, self._load()),
            stuck=max(0, self._stuck()),
            max_concurrency=self.registration.max_concurrency,
            sent_ms=now_ms(),
        )
        batcher = BeatBatcher.of(self.conn, self.login)
        return await batcher.send(self._registry_ex, beat, self._queue.name)

    async def _send(self, message: aio_pika.Message) -> None:
        """Publish to the registry, stamped with this process's login (``user_id``)."""
        if self._registry_ex is None:
            raise NotStarted("RegistrySession.start() was not awaited")
        message.user_id = self.login
        await self._registry_ex.publish(
            message, routing_key=self.conn.topology.registry_key, mandatory=False
        )
