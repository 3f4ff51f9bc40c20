"""`BeatBatcher`: the heartbeats of one connection's sessions, sent as one message.

A worker process hosting many agents runs one `RegistrySession` per instance. Each beating
on its own costs the broker and the registry a message per instance per interval (100
agents at 5 s: 20 messages a second, most of an idle mesh's CPU). Instead each session hands
its beat to the batcher of its connection and login (`BeatBatcher.of`): the first beat of an
empty batcher opens a window (`gather_window_s`: a twentieth of the interval, at most
`MAX_GATHER_S`), and when it ends the beats go as one `HeartbeatBatch` (alone: as a plain
``heartbeat``, the wire of a single session unchanged). A session waits for that publish,
so an outage reaches every session of the window as it reached each one before. Its next
beat is due at the batcher's next slot (`next_due`: the first window's opening plus a whole
number of intervals), so after one beat every session of the connection beats at the same
moments and one message an interval carries them all; a session's first aligned beat comes
earlier than its own schedule, or later by at most the window.

A beat of a session stopped while its window is open is taken out (no heartbeat after a
goodbye). One batcher per connection and login: a registry under access control checks each
beat against the message's ``user_id``, which the broker checks against the connection.
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from dataclasses import dataclass

from aio_pika.abc import AbstractExchange

from mesh.connection import MeshConnection
from mesh.registry import protocol
from mesh.schemas import MAX_BATCH_BEATS, BatchedBeat, Heartbeat, HeartbeatBatch

logger = logging.getLogger(__name__)

#: the longest a beat waits for others to travel with it
MAX_GATHER_S = 0.25


def gather_window_s(heartbeat_s: float) -> float:
    """How long a batcher gathers beats: a twentieth of the interval, at most 0.25 s."""
    return min(MAX_GATHER_S, heartbeat_s / 20)


@dataclass(slots=True, eq=False)
class _Beat:
    beat: Heartbeat
    reply_to: str
    exchange: AbstractExchange


class BeatBatcher:
    """Gathers the beats of sessions on one connection and login; see the module doc."""

    def __init__(self, *, window_s: float, interval_s: float, login: str | None, key: str) -> None:
        self.window_s = window_s
        #: the heartbeat interval: a beat expires after it, and the slots are this far apart
        self.interval_s = interval_s
        self.login = login
        #: the registry's routing key
        self.key = key
        self._pending: list[_Beat] = []
        self._done: asyncio.Future[None] | None = None
        #: the opening of the first window (loop clock): the slots count from it
        self._phase: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        #: messages sent and the beats they carried (benches and tests)
        self.messages = 0
        self.beats = 0

    @classmethod
    def of(cls, conn: MeshConnection, login: str | None) -> BeatBatcher:
        """The batcher of `conn` for `login` (made on first use, gone with `conn`)."""
        per_login = _BATCHERS.setdefault(conn, {})
        found = per_login.get(login)
        if found is None:
            settings = conn.settings
            found = per_login[login] = cls(
                window_s=gather_window_s(settings.heartbeat_s),
                interval_s=settings.heartbeat_s,
                login=login,
                key=conn.topology.registry_key,
            )
        return found

    async def send(self, exchange: AbstractExchange, beat: Heartbeat, reply_to: str) -> float:
        """Send `beat` with the others of its window, through `exchange` (the registry's).

        Returns when the session's next beat is due (loop clock, `next_due`). Raises what
        the publish raised."""
        loop = asyncio.get_running_loop()
        item = _Beat(beat, reply_to, exchange)
        if not self._pending:
            if self._phase is None:
                self._phase = loop.time()
            self._done = loop.create_future()
            self._timer = loop.call_later(self.window_s, self._due)
        self._pending.append(item)
        done = self._done
        assert done is not None
        if len(self._pending) >= MAX_BATCH_BEATS:
            self._due()
        try:
            await asyncio.shield(done)
        except asyncio.CancelledError:
            if item in self._pending:
                self._pending.remove(item)  # stopped before its window was sent
            raise
        return self.next_due(loop.time())

    def next_due(self, now: float) -> float:
        """The first slot after `now`: the first window's opening plus whole intervals."""
        phase = now if self._phase is None else self._phase
        return phase + (math.floor((now - phase) / self.interval_s) + 1) * self.interval_s

    def _due(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        pending, done = self._pending, self._done
        self._pending, self._done = [], None
        if done is None:
            return
        if not pending:
            done.set_result(None)
            return
        sending = asyncio.ensure_future(self._publish(pending, done))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def _publish(self, pending: list[_Beat], done: asyncio.Future[None]) -> None:
        try:
            if len(pending) == 1:
                one = pending[0]
                message = protocol.heartbeat_message(
                    one.beat, reply_to=one.reply_to, expiration_s=self.interval_s
                )
            else:
                batch = HeartbeatBatch(
                    beats=[BatchedBeat(**p.beat.model_dump(), reply_to=p.reply_to) for p in pending]
                )
                message = protocol.heartbeats_message(batch, expiration_s=self.interval_s)
            message.user_id = self.login
            # the newest session's channel: the likeliest to be open
            await pending[-1].exchange.publish(message, routing_key=self.key, mandatory=False)
        except BaseException as exc:
            if not done.done():
                done.set_exception(exc)
                done.exception()  # retrieved: each session that waits re-raises it
            if not isinstance(exc, Exception):
                raise
            return
        self.messages += 1
        self.beats += len(pending)
        if not done.done():
            done.set_result(None)


_BATCHERS: weakref.WeakKeyDictionary[MeshConnection, dict[str | None, BeatBatcher]] = (
    weakref.WeakKeyDictionary()
)

__all__ = ["MAX_GATHER_S", "BeatBatcher", "gather_window_s"]
