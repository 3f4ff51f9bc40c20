"""Acknowledging deliveries in batches: one ``basic.ack(multiple=True)`` for many messages.

A consumer that handles deliveries concurrently finishes them out of order. `AckBatcher`
keeps them in delivery order and, once per event-loop turn, acks the longest finished run
from the oldest with a single ``multiple=True`` frame. A message settled otherwise (nacked,
rejected) counts as finished: ``multiple`` only acks deliveries still outstanding. After a
reconnect the broker redelivers what was not acked; deliveries of a channel that closed are
dropped from the batch (their ack could not reach the broker anyway).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any

from aio_pika.abc import AbstractIncomingMessage

from mesh.retrying import quietly

logger = logging.getLogger(__name__)


class AckBatcher:
    """Acks one consumer's deliveries in batches (use one per channel)."""

    def __init__(self) -> None:
        #: [delivery tag, message, finished, needs an ack] in delivery order
        self._window: deque[list[Any]] = deque()
        self._index: dict[int, list[Any]] = {}
        self._scheduled = False
        self._sending: set[asyncio.Future[bool]] = set()
        self.frames = 0
        self.acked = 0

    def received(self, message: AbstractIncomingMessage) -> None:
        """Track a delivery as it arrives (before it is handled)."""
        tag = message.delivery_tag
        if tag is None:
            return
        if self._window and tag <= self._window[-1][0]:
            # tags went back: a new channel after a reconnect; the old ones are void
            self._window.clear()
            self._index.clear()
        item = [tag, message, False, False]
        self._window.append(item)
        self._index[tag] = item

    def ack(self, message: AbstractIncomingMessage) -> None:
        """The delivery is handled: ack it with the next batch."""
        self._finish(message, needs_ack=True)

    def settled(self, message: AbstractIncomingMessage) -> None:
        """The delivery was nacked or rejected by the caller: nothing to ack."""
        self._finish(message, needs_ack=False)

    def _finish(self, message: AbstractIncomingMessage, *, needs_ack: bool) -> None:
        item = self._index.get(message.delivery_tag or -1)
        if item is None or item[1] is not message:
            if needs_ack:  # not tracked (or from a closed channel): ack it alone
                self._send(message, multiple=False)
            return
        item[2], item[3] = True, needs_ack
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        last: AbstractIncomingMessage | None = None
        count = 0
        while self._window and self._window[0][2]:
            tag, message, _done, needs_ack = self._window.popleft()
            del self._index[tag]
            if needs_ack:
                last = message
                count += 1
        if last is not None:
            self.frames += 1
            self.acked += count
            self._send(last, multiple=True)

    def _send(self, message: AbstractIncomingMessage, *, multiple: bool) -> None:
        sending = asyncio.ensure_future(quietly(message.ack(multiple=multiple)))
        self._sending.add(sending)
        sending.add_done_callback(self._sending.discard)

    async def drain(self) -> None:
        """Send what is finished and wait for the acks in flight (before closing)."""
        self._flush()
        if self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)


__all__ = ["AckBatcher"]
