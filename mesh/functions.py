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

A function bound with ``batched`` (`Library.bind`) joins the calls of its client issued in
the same turn of the event loop, or while the client's last batch is out (`CallBatch`):
they go to Redis in one pipeline, one round trip for many concurrent tasks' claims and
commits, or a router's relays of result notices. Each call stays one function, atomic
on its own, and gets its own answer or error. A plain command whose answer nobody awaits
(a task's ``replied`` mark) rides the client's next pipeline (`CallBatch.ride`) instead
of a round trip of its own.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from redis.exceptions import NoPermissionError, ResponseError

from mesh.errors import RedisFunctionsMissing

logger = logging.getLogger(__name__)

#: at most this many calls in one pipeline of a `CallBatch`
MAX_BATCH = 64
#: at most this many riding commands in one pipeline of a `CallBatch`
MAX_RIDERS = 256
#: a queued call: function name, keys, args, and the caller's answer
_Call = tuple[str, Sequence[Any], Sequence[Any], "asyncio.Future[Any]"]
#: a riding command: its arguments, the command's name first (`CallBatch.ride`)
_Rider = tuple[Any, ...]

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

    def bind(self, redis: Any, script: str, *, batched: bool = False) -> Function:
        """`script` of this library, called on the client `redis`; with `batched`, in
        one pipeline with the client's other batched calls (`CallBatch`)."""
        return Function(self, self.function_name(script), redis, batched)

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
    #: sent in one pipeline with the client's other batched calls (`CallBatch`)
    batched: bool = False

    async def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = ()) -> Any:
        """``FCALL``; a missing library is loaded once (see the module docstring)."""
        try:
            if self.batched:
                return await CallBatch.of(self.redis).call(self.name, keys, args)
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


class CallBatch:
    """The batched FCALLs of one Redis client, one pipeline out at a time.

    A call made while none is out goes at the end of the loop turn, with every call made
    in the turn; calls made while one is out go together in the next, at most `MAX_BATCH`
    (batching adds no wait of its own but that round trip). All go in one pipeline without
    a transaction (a lone call as a plain FCALL). Each caller gets its own answer, or its
    own error (a missing function, BUSY); an error of the connection fails every call of
    the pipeline, as it would have failed each one alone.

    Commands that `ride` go with the next pipeline of calls, or alone once they waited
    their `wait_s` with no call to ride with; nobody awaits their answers (an error is
    logged, and the command is lost, as a write without retry would be).
    """

    def __init__(self, redis: Any) -> None:
        # not the client itself: it is the key of the batch's weak entry in `_BATCHES`
        self._redis = weakref.ref(redis)
        self._queued: list[_Call] = []
        self._sending: asyncio.Task[None] | None = None
        #: commands riding the next pipeline (`ride`)
        self._riders: list[_Rider] = []
        #: sends the riders alone once they waited `wait_s` with no call to ride with
        self._ride_timer: asyncio.TimerHandle | None = None
        #: the riders waited long enough: the next drain sends them, calls or not
        self._riders_due = False
        #: pipelines out carrying riders (a `flush` waits for them)
        self._carrying: set[asyncio.Future[None]] = set()
        #: pipelines (or lone calls) sent, and the calls and riders they carried
        self.batches = 0
        self.calls = 0
        self.rides = 0

    @classmethod
    def of(cls, redis: Any) -> CallBatch:
        found = _BATCHES.get(redis)
        if found is None:
            found = _BATCHES[redis] = cls(redis)
        return found

    def call(self, name: str, keys: Sequence[Any], args: Sequence[Any]) -> asyncio.Future[Any]:
        """The answer of ``FCALL name`` (a future: await it)."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        self._queued.append((name, keys, args, answer))
        if self._sending is None:
            # a task starts at the next turn: the calls of this one join the first batch
            self._sending = loop.create_task(self._drain())
        return answer

    def ride(self, command: _Rider, wait_s: float) -> None:
        """Send `command` (``("HSET", key, field, value)``) with the next pipeline of calls,
        or alone after `wait_s` when no call goes meanwhile; its answer is nobody's."""
        self._riders.append(command)
        if self._ride_timer is None and not self._riders_due:
            loop = asyncio.get_running_loop()
            self._ride_timer = loop.call_later(wait_s, self._ride_due)

    def _ride_due(self) -> None:
        self._ride_timer = None
        if not self._riders:
            return
        self._riders_due = True
        if self._sending is None:
            self._sending = asyncio.get_running_loop().create_task(self._drain())

    def _take_riders(self) -> list[_Rider]:
        riders = self._riders[:MAX_RIDERS]
        del self._riders[:MAX_RIDERS]
        if not self._riders:
            self._riders_due = False
            if self._ride_timer is not None:
                self._ride_timer.cancel()
                self._ride_timer = None
        return riders

    async def flush(self) -> None:
        """Send the riders that wait now, in a pipeline of their own, and wait for the
        pipelines under way that carry riders."""
        riders: list[_Rider] = []
        while self._riders:
            riders += self._take_riders()
        carrying = list(self._carrying)
        if riders:
            self.rides += len(riders)
            await self._send([], riders)
        if carrying:
            await asyncio.gather(*carrying, return_exceptions=True)

    async def _drain(self) -> None:
        try:
            while self._queued or self._riders_due:
                batch = self._queued[:MAX_BATCH]
                del self._queued[:MAX_BATCH]
                riders = self._take_riders()
                self.batches += 1
                self.calls += len(batch)
                self.rides += len(riders)
                if not riders:
                    await self._send(batch, riders)
                    continue
                carried = asyncio.get_running_loop().create_future()
                self._carrying.add(carried)
                try:
                    await self._send(batch, riders)
                finally:
                    self._carrying.discard(carried)
                    carried.set_result(None)
        except asyncio.CancelledError:
            queued, self._queued = self._queued, []
            for *_, answer in queued:
                answer.cancel()
            raise
        finally:
            self._sending = None

    async def _send(self, batch: list[_Call], riders: list[_Rider]) -> None:
        answers: list[Any]
        try:
            redis = self._redis()
            if redis is None:
                raise RuntimeError("the Redis client of these calls is gone")
            if len(batch) == 1 and not riders:
                name, keys, args, _ = batch[0]
                answers = [await redis.fcall(name, len(keys), *keys, *args)]
            else:
                pipe = redis.pipeline(transaction=False)
                for name, keys, args, _ in batch:
                    pipe.fcall(name, len(keys), *keys, *args)
                for command in riders:
                    pipe.execute_command(*command)
                answers = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:
            for *_, answer in batch:
                answer.cancel()
            raise
        except Exception as exc:
            for *_, answer in batch:
                if not answer.done():
                    answer.set_exception(exc)
            if riders:
                logger.info("%d riding Redis command(s) not sent (%r)", len(riders), exc)
            return
        refused = [a for a in answers[len(batch) :] if isinstance(a, Exception)]
        if refused:
            logger.info("%d riding Redis command(s) refused (%r)", len(refused), refused[0])
        for (*_, answer), value in zip(batch, answers[: len(batch)], strict=True):
            if answer.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(value, Exception):
                answer.set_exception(value)
            else:
                answer.set_result(value)


#: each Redis client's `CallBatch`, while the client lives
_BATCHES: weakref.WeakKeyDictionary[Any, CallBatch] = weakref.WeakKeyDictionary()


__all__ = ["LIBRARY_PREFIX", "CallBatch", "Function", "Library", "is_missing"]
