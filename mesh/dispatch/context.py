"""Shared context by reference: a trace's context lives in Redis, envelopes carry its ref.

A reference is ``ctx:<trace_id>:<version>``. Every save writes a new version (never
overwrites one a running hop may still read) with the context TTL (24 h by default).

Under access control no worker touches a context of the mesh's keys: a worker saves in
its agent's view (`Keys.for_agent`, which its Redis ACL already holds), and the reference
names that agent, ``ctx:<trace_id>:<version>/<agent_id>`` (``/`` is in no id), so each
reference names one stored version wherever it travels. When a router dispatches a task
carrying a context of another agent's to an agent, it copies that version into the
agent's view in the same step as the task's seed (`TaskStore.seed`, `seed_keys`), and only
when it is of the task's own trace. A worker thus reads the contexts of the traces of the
tasks dispatched to its agent and nothing else: any other reference is `ContextNotFound`
(and a raw read of another agent's keys or the mesh's is refused by Redis).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from mesh.config import Settings
from mesh.errors import ContextNotFound
from mesh.keys import Keys
from mesh.schemas import TaskEnvelope
from mesh.schemas.codec import dumps, loads

REF_PREFIX = "ctx:"
#: what an agent id is (`mesh.schemas.envelope.Identifier`): a reference's origin must be one
_AGENT_ID = re.compile(r"[A-Za-z0-9_.:@-]{1,128}")


@dataclass(frozen=True, slots=True)
class ContextRef:
    """A parsed reference."""

    trace_id: str
    version: int
    #: the agent whose worker saved it, under access control ('' without)
    origin: str = ""


def make_ref(trace_id: str, version: int, origin: str = "") -> str:
    tail = f"{version}/{origin}" if origin else str(version)
    return f"{REF_PREFIX}{trace_id}:{tail}"


def split_ref(ref: str) -> ContextRef:
    """The parts of a reference; raises `ContextNotFound` for a malformed one."""
    body = ref[len(REF_PREFIX) :] if ref.startswith(REF_PREFIX) else ""
    body, slash, origin = body.partition("/")
    trace_id, _, version = body.rpartition(":")
    if (
        not trace_id
        or not (version.isascii() and version.isdigit())
        or (slash and not _AGENT_ID.fullmatch(origin))
    ):
        raise ContextNotFound(
            f"{ref!r} is not a context reference (ctx:<trace_id>:<version>, under access "
            "control ctx:<trace_id>:<version>/<agent_id>)"
        )
    return ContextRef(trace_id, int(version), origin)


def parse_ref(ref: str) -> tuple[str, int]:
    """(trace_id, version) of a reference; raises `ContextNotFound` for a malformed one."""
    parsed = split_ref(ref)
    return parsed.trace_id, parsed.version


def seed_keys(keys: Keys, envelope: TaskEnvelope, agent_id: str) -> list[str]:
    """Under access control, before `envelope` is dispatched to `agent_id` (`keys`: the
    mesh's): the key of the context it carries in the view of the agent that saved it, and
    the key of its copy in `agent_id`'s view. [] when there is nothing to copy: no context,
    one of `agent_id`'s own, a malformed one or one of another trace (never copied: its
    worker gets `ContextNotFound`)."""
    if envelope.context_ref is None:
        return []
    try:
        ref = split_ref(envelope.context_ref)
    except ContextNotFound:
        return []
    if not ref.origin or ref.origin == agent_id or ref.trace_id != envelope.trace_id:
        return []
    return [
        keys.for_agent(view).context(ref.trace_id, ref.version, ref.origin)
        for view in (ref.origin, agent_id)
    ]


class ContextStore:
    """Versioned shared context per trace (in `keys`; saves named after `origin` if any)."""

    def __init__(self, redis: Any, keys: Keys, ttl_s: int, *, origin: str = "") -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s
        self.origin = origin

    @classmethod
    def of_worker(cls, redis: Any, keys: Keys, settings: Settings, agent_id: str) -> ContextStore:
        """The store of a worker of `agent_id` (`keys`: the mesh's): the mesh's keys, and
        under access control its agent's view, each version it saves named after it."""
        ttl_s = settings.context_ttl_s
        if settings.access_control:
            return cls(redis, keys.for_agent(agent_id), ttl_s, origin=agent_id)
        return cls(redis, keys, ttl_s)

    async def load(self, ref: str) -> dict[str, Any]:
        """The context stored under `ref`.

        Raises:
            ContextNotFound: nothing is stored under `ref` (past `context_ttl_s`?; under
                access control: not a context of a trace dispatched to this agent).
        """
        parsed = split_ref(ref)
        raw = await self.redis.get(
            self.keys.context(parsed.trace_id, parsed.version, parsed.origin)
        )
        if raw is None:
            scope = (
                f"; a worker of {self.origin!r} reads only the contexts of tasks dispatched to it"
                if self.origin
                else ""
            )
            raise ContextNotFound(
                f"no context stored under {ref!r}; contexts live context_ttl_s={self.ttl_s}s"
                + scope
            )
        data: dict[str, Any] = loads(raw)
        return data

    async def save(self, trace_id: str, data: dict[str, Any]) -> str:
        """Store `data` as the trace's next context version; returns its reference."""
        version = int(await self.redis.incr(self.keys.context_version(trace_id)))
        await self.redis.expire(self.keys.context_version(trace_id), self.ttl_s)
        key = self.keys.context(trace_id, version, self.origin)
        await self.redis.set(key, dumps(data), ex=self.ttl_s)
        return make_ref(trace_id, version, self.origin)


__all__ = ["ContextNotFound", "ContextRef", "ContextStore", "make_ref", "parse_ref", "seed_keys"]
