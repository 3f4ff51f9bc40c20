"""`EventBatcher`: events that travel together, one message per routing key.

A component publishes an event or two per task (a worker its ``task.<state>.<router>``
outcome, a router its ``route.decision``); each one a message of its own costs the broker
as much as the task itself. The batcher gathers the encoded events of each routing key
for a short window (`Settings.event_batch_window_ms`, started by the first event of an
empty batcher) and sends them as one message (`mesh.schemas.EventBatch`, marked by the
``x-mesh-batch`` header), or as the plain event when it is alone. A key whose batch
reaches `Settings.event_batch_max_events` events, or would pass `EVENT_BATCH_MAX_BYTES`,
is sent at once by the `add` that filled it, which waits for that publish (a publisher
faster than the broker is held as before).

The routing key stays the event's own, so topic permissions and bindings are those of
single events; every consumer reads both shapes through `mesh.wire.events_of`. When the
window ends, every key is sent in the order its first event came: events of one key keep
their order, events of different keys within one window may not (as events of different
processes never did; each carries its ``ts_ms``); `flush` (the
publisher's close) sends what is pending and waits for the sends under way. A send the
window started that fails (an outage) loses its events, as a lost single event would be:
events are transient, and `on_lost` is told.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from mesh.topology import EVENT_BATCH_MAX_BYTES

logger = logging.getLogger(__name__)

#: sends the encoded events of one routing key (one: a plain event; more: a batch)
Send = Callable[[str, Sequence[bytes]], Awaitable[None]]
#: told of events a send of the window could not deliver: routing key, count, the error
Lost = Callable[[str, int, BaseException], None]


@dataclass(slots=True)
class _Pending:
    bodies: list[bytes] = field(default_factory=list)
    size: int = 0


def _log_lost(key: str, count: int, exc: BaseException) -> None:
    logger.warning("%d event(s) of %s not sent: %r", count, key, exc)


class EventBatcher:
    """Gathers encoded events per routing key; `send` publishes one key's list."""

    def __init__(
        self,
        send: Send,
        *,
        window_s: float,
        max_events: int,
        max_bytes: int = EVENT_BATCH_MAX_BYTES,
        on_lost: Lost = _log_lost,
    ) -> None:
        self._send = send
        self.window_s = window_s
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.on_lost = on_lost
        #: what waits, by routing key, in the order of each key's first event
        self._pending: dict[str, _Pending] = {}
        self._timer: asyncio.TimerHandle | None = None
        #: sends the window started, not finished yet
        self._sending: set[asyncio.Task[None]] = set()
        #: messages sent, and the events they carried (for benches and tests)
        self.messages = 0
        self.events = 0

    @property
    def enabled(self) -> bool:
        """False: a zero window or batches of one, every event goes at once."""
        return self.window_s > 0 and self.max_events > 1

    @property
    def pending(self) -> int:
        """Events waiting for their batch to go."""
        return sum(len(p.bodies) for p in self._pending.values())

    async def add(self, key: str, body: bytes) -> None:
        """Queue one encoded event for `key`; sends that key's batch when it is full."""
        if not self.enabled:
            await self._publish(key, [body])
            return
        found = self._pending.get(key)
        if found is not None and found.size + len(body) + 1 > self.max_bytes:
            await self._flush_key(key)  # this one starts the next batch of the key
            found = None
        if found is None:
            found = self._pending[key] = _Pending()
        found.bodies.append(body)
        found.size += len(body) + 1
        if len(found.bodies) >= self.max_events or found.size >= self.max_bytes:
            await self._flush_key(key)
        elif self._timer is None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(self.window_s, self._window_ended)

    async def flush(self) -> None:
        """Send everything pending now and wait for the sends under way (close, stop); a
        send that fails is told to `on_lost`."""
        self._cancel_timer()
        pending, self._pending = self._pending, {}
        await self._send_window(pending)
        while running := [task for task in self._sending if not task.done()]:
            await asyncio.gather(*running, return_exceptions=True)

    def discard(self) -> int:
        """Drop what is pending (the channel is gone); how many events were dropped."""
        self._cancel_timer()
        dropped = self.pending
        self._pending.clear()
        return dropped

    # --- machinery ---------------------------------------------------------------------
    async def _flush_key(self, key: str) -> None:
        batch = self._pending.pop(key, None)
        if not self._pending:
            self._cancel_timer()
        if batch is not None and batch.bodies:
            await self._publish(key, batch.bodies)

    async def _publish(self, key: str, bodies: list[bytes]) -> None:
        await self._send(key, bodies)
        self.messages += 1
        self.events += len(bodies)

    def _cancel_timer(self) -> None:
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()

    def _window_ended(self) -> None:
        self._timer = None
        pending, self._pending = self._pending, {}
        if not pending:
            return
        task = asyncio.get_running_loop().create_task(self._send_window(pending))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send_window(self, pending: dict[str, _Pending]) -> None:
        for key, batch in pending.items():
            try:
                await self._publish(key, batch.bodies)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.on_lost(key, len(batch.bodies), exc)


__all__ = ["EventBatcher", "Lost", "Send"]
