"""`Lifecycle`: the async context manager of every long-lived component (habit 8).

A component defines idempotent ``start()`` and ``close()``; inheriting `Lifecycle` makes
``async with Component(...) as c:`` start it and close it again, however the block ends.
`mesh.services` composes started components with `contextlib.AsyncExitStack`.
"""

from __future__ import annotations

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


__all__ = ["Component", "Lifecycle"]
