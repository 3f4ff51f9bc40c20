"""Sliding windows over event time (epoch ms), the pure arithmetic behind the alerts.

Timestamps are the events' own ``ts_ms`` (or the observer's clock for queue samples); a
window keeps what happened in the last `window_s` seconds, expired lazily on each call.
Nothing here does I/O or reads a clock.
"""

from __future__ import annotations

from collections import deque


class RatioWindow:
    """The share of hits among the samples of the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_ms = int(window_s * 1000)
        self._samples: deque[tuple[int, bool]] = deque()
        self._hits = 0

    def add(self, ts_ms: int, hit: bool) -> None:
        self._samples.append((ts_ms, hit))
        self._hits += hit
        self.expire(ts_ms)

    def expire(self, now_ms: int) -> None:
        """Drop the samples older than the window (as seen at `now_ms`)."""
        while self._samples and self._samples[0][0] <= now_ms - self.window_ms:
            self._hits -= self._samples.popleft()[1]

    @property
    def count(self) -> int:
        return len(self._samples)

    @property
    def hits(self) -> int:
        return self._hits

    def ratio(self) -> float | None:
        """hits / samples (None: no sample in the window)."""
        return self._hits / len(self._samples) if self._samples else None


class CountWindow:
    """How many times something happened in the last `window_s` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_ms = int(window_s * 1000)
        self._times: deque[int] = deque()

    def add(self, ts_ms: int) -> None:
        self._times.append(ts_ms)
        self.expire(ts_ms)

    def expire(self, now_ms: int) -> None:
        while self._times and self._times[0] <= now_ms - self.window_ms:
            self._times.popleft()

    @property
    def count(self) -> int:
        return len(self._times)


class GrowthWindow:
    """How much a level (a queue depth) rose within the last `window_s` seconds: the last
    sample less the lowest one of the window (a purge in between does not hide growth)."""

    def __init__(self, window_s: float) -> None:
        self.window_ms = int(window_s * 1000)
        self._samples: deque[tuple[int, int]] = deque()

    def add(self, ts_ms: int, level: int) -> None:
        self._samples.append((ts_ms, level))
        while self._samples and self._samples[0][0] <= ts_ms - self.window_ms:
            self._samples.popleft()

    def growth(self) -> int:
        if not self._samples:
            return 0
        return self._samples[-1][1] - min(level for _, level in self._samples)

    @property
    def level(self) -> int:
        return self._samples[-1][1] if self._samples else 0


__all__ = ["CountWindow", "GrowthWindow", "RatioWindow"]
