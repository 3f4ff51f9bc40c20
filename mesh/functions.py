"""Redis functions: the mesh's Lua scripts as function libraries, loaded once, run by FCALL.

No role's Redis user may run EVAL, SCRIPT or FUNCTION (`mesh.access.roles`): a script of
its own could block Redis for everyone. A role calls the mesh's functions only, which the
operator loads when it provisions (``mesh access provision``: ``FUNCTION LOAD REPLACE``).
Without access control any process loads a library itself the first time Redis answers
that one of its functions is missing (a fresh or emptied Redis), then calls again.

Each module keeps its scripts as EVAL bodies (``KEYS``, ``ARGV``, local helpers); a
library registers each body verbatim as ``function(KEYS, ARGV) <body> end``, so every name
in it means what it meant under EVAL. The library's name and its functions' names carry a
digest of the bodies: two versions of the mesh in one Redis each call their own code, and
loading the same code again changes nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from mesh.errors import RedisFunctionsMissing

#: what the name of every library of the mesh starts with (``FUNCTION LIST LIBRARYNAME``)
LIBRARY_PREFIX = "agent_reach_"
#: how many hex digits of the bodies' digest a library's name carries
DIGEST_CHARS = 12


def is_missing(exc: ResponseError) -> bool:
    """Whether Redis answered that the called function does not exist."""
    return "Function not found" in str(exc)


@dataclass(frozen=True)
class Library:
    """Named Lua bodies (EVAL style) that load as one Redis function library."""

    label: str
    scripts: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, label: str, **scripts: str) -> Library:
        return cls(label, tuple(scripts.items()))

    @cached_property
    def digest(self) -> str:
        text = "\0".join(f"{name}\0{body}" for name, body in self.scripts)
        return hashlib.sha1(f"{self.label}\0{text}".encode()).hexdigest()[:DIGEST_CHARS]

    @property
    def name(self) -> str:
        """``agent_reach_<label>_<digest>``."""
        return f"{LIBRARY_PREFIX}{self.label}_{self.digest}"

    def function_name(self, script: str) -> str:
        if script not in dict(self.scripts):
            raise KeyError(f"library {self.label!r} has no script {script!r}")
        return f"{self.name}_{script}"

    @cached_property
    def code(self) -> str:
        """The ``FUNCTION LOAD`` text: one ``redis.register_function`` per body."""
        parts = [f"#!lua name={self.name}\n"]
        for script, body in self.scripts:
            parts.append(
                f"redis.register_function('{self.function_name(script)}', "
                f"function(KEYS, ARGV)\n{body}\nend)\n"
            )
        return "".join(parts)

    def bind(self, redis: Any, script: str) -> Function:
        """`script` of this library, called on the client `redis`."""
        return Function(self, self.function_name(script), redis)

    async def load(self, redis: Any) -> None:
        """``FUNCTION LOAD REPLACE`` on an asyncio client.

        Raises:
            RedisFunctionsMissing: the login may not load functions (a role under access
                control: the operator loads them at provisioning).
        """
        try:
            await redis.function_load(self.code, replace=True)
        except NoPermissionError:
            raise RedisFunctionsMissing(self.name) from None

    def load_sync(self, redis: Any) -> None:
        """`load` on a blocking client (provisioning); redis-py's errors pass through."""
        redis.execute_command("FUNCTION", "LOAD", "REPLACE", self.code)


@dataclass(frozen=True, slots=True)
class Function:
    """One function of a library on one client; called like redis-py's ``Script``."""

    library: Library
    name: str
    redis: Any

    async def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        """``FCALL``; a missing library is loaded once (see the module docstring)."""
        try:
            return await self.redis.fcall(self.name, len(keys), *keys, *args)
        except ResponseError as exc:
            if not is_missing(exc):
                raise
        await self.library.load(self.redis)
        return await self.redis.fcall(self.name, len(keys), *keys, *args)

    def queue(self, pipe: Any, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> None:
        """Queue the call on a pipeline (run it with `pipelined`)."""
        pipe.fcall(self.name, len(keys), *keys, *args)

    async def pipelined(self, fill: Callable[[Any], None]) -> list[Any]:
        """Fill a fresh pipeline (no transaction) and run it; when a function was missing,
        load the library and run it all again (so every call queued must be idempotent)."""
        for attempt in (1, 2):
            pipe = self.redis.pipeline(transaction=False)
            fill(pipe)
            try:
                answers: list[Any] = await pipe.execute()
                return answers
            except ResponseError as exc:
                if attempt == 2 or not is_missing(exc):
                    raise
            await self.library.load(self.redis)
        raise AssertionError("unreachable")  # pragma: no cover


__all__ = ["LIBRARY_PREFIX", "Function", "Library", "is_missing"]
