"""`IngressBudget`: how much one broker user may send to ingress (a token bucket each).

One client must not stop the mesh by flooding it (bodies that are invalid, high-priority,
or merely many): every ingress delivery costs its sender one message and its size from
two buckets refilled at ``ingress_rate_per_user`` messages and ``ingress_bytes_per_user``
bytes a second, holding ``ingress_burst_s`` seconds of each. A delivery the buckets cannot
pay is refused before it is decoded. Routers keep their buckets in memory: with N routers
a user may send N times the budget, which bounds a flood all the same. The buckets of users
quiet for a minute are forgotten.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mesh.config import Settings

#: a bucket untouched this long is full again: forget it
IDLE_FORGET_S = 60.0


@dataclass(slots=True)
class _Bucket:
    messages: float
    size: float
    at: float


class IngressBudget:
    def __init__(self, settings: Settings) -> None:
        self.rate = settings.ingress_rate_per_user
        self.bytes_rate = settings.ingress_bytes_per_user
        self.burst_s = settings.ingress_burst_s
        self._buckets: dict[str, _Bucket] = {}
        self._swept: float | None = None
        #: deliveries refused, by user
        self.refused: dict[str, int] = {}

    @property
    def limited(self) -> bool:
        return self.rate > 0 or self.bytes_rate > 0

    def allow(self, user: str, size: int, now: float | None = None) -> bool:
        """Charge `user` one message of `size` bytes; False when its budget cannot pay."""
        if not self.limited:
            return True
        now = time.monotonic() if now is None else now
        if self._swept is None:
            self._swept = now
        elif now - self._swept > IDLE_FORGET_S:
            self._sweep(now)
        full_messages, full_size = self.rate * self.burst_s, self.bytes_rate * self.burst_s
        bucket = self._buckets.get(user)
        if bucket is None:
            bucket = self._buckets[user] = _Bucket(full_messages, full_size, now)
        elapsed = now - bucket.at
        bucket.at = now
        bucket.messages = min(full_messages, bucket.messages + elapsed * self.rate)
        bucket.size = min(full_size, bucket.size + elapsed * self.bytes_rate)
        if (self.rate and bucket.messages < 1) or (self.bytes_rate and bucket.size < size):
            self.refused[user] = self.refused.get(user, 0) + 1
            return False
        bucket.messages -= 1
        bucket.size -= size
        return True

    def _sweep(self, now: float) -> None:
        self._swept = now
        for user in [u for u, b in self._buckets.items() if now - b.at > IDLE_FORGET_S]:
            del self._buckets[user]


__all__ = ["IngressBudget"]
