"""`Lifecycle`: the async context manager of every long-lived component (habit 8).

A component defines idempotent ``start()`` and ``close()``; inheriting `Lifecycle` makes
``async with Component(...) as c:`` start it and close it again, however the block ends.
`mesh.services` composes started components with `contextlib.AsyncExitStack`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Protocol, Self


class Component(Protocol):
    """Anything with idempotent ``start()`` and ``close()``."""

    async def start(self) -> object: ...

    async def close(self) -> None: ...


class Lifecycle:
    """Mixin: ``__aenter__`` awaits ``start()`` and returns self; ``__aexit__`` ``close()``."""

    async def start(self) -> object:
        """Open what the component needs; a second call does nothing."""
        raise NotImplementedError

    async def close(self) -> None:
        """Release everything `start` opened; safe to call twice and before `start`."""
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


class Stopper:
    """The stop of started services: ``await stop()`` stops them (a worker drains, waiting
    up to its grace for the tasks in flight); ``stop.hurry()`` (a second Ctrl-C) ends every
    grace at once, what is still in flight handed back."""

    def __init__(
        self, stop: Callable[[], Awaitable[None]], hurry: Callable[[], None] | None = None
    ) -> None:
        self._stop = stop
        self._hurry = hurry

    async def __call__(self) -> None:
        await self._stop()

    def hurry(self) -> None:
        if self._hurry is not None:
            self._hurry()

    @classmethod
    def around(
        cls, inner: Callable[[], Awaitable[None]], stop: Callable[[], Awaitable[None]]
    ) -> Stopper:
        """`stop`, hurried as `inner` is (`inner` a `Stopper` or a plain stop)."""
        return cls(stop, inner.hurry if isinstance(inner, Stopper) else None)


__all__ = ["Component", "Lifecycle", "Stopper"]
