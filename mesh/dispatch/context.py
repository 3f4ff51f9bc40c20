"""Shared context by reference: a trace's context lives in Redis, envelopes carry its ref.

A reference is ``ctx:<trace_id>:<version>``. Every save writes a new version (never
overwrites one a running hop may still read) with the context TTL (24 h by default).
"""

from __future__ import annotations

from typing import Any

from mesh.errors import ContextNotFound
from mesh.keys import Keys
from mesh.schemas.codec import dumps, loads

REF_PREFIX = "ctx:"


def make_ref(trace_id: str, version: int) -> str:
    return f"{REF_PREFIX}{trace_id}:{version}"


def parse_ref(ref: str) -> tuple[str, int]:
    """(trace_id, version) of a reference; raises `ContextNotFound` for a malformed one."""
    body = ref[len(REF_PREFIX) :] if ref.startswith(REF_PREFIX) else ""
    trace_id, _, version = body.rpartition(":")
    if not trace_id or not version.isdigit():
        raise ContextNotFound(f"{ref!r} is not a context reference (ctx:<trace_id>:<version>)")
    return trace_id, int(version)


class ContextStore:
    """Versioned shared context per trace."""

    def __init__(self, redis: Any, keys: Keys, ttl_s: int) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s

    async def load(self, ref: str) -> dict[str, Any]:
        """The context stored under `ref`.

        Raises:
            ContextNotFound: nothing is stored under `ref` (past `context_ttl_s`?).
        """
        trace_id, version = parse_ref(ref)
        raw = await self.redis.get(self.keys.context(trace_id, version))
        if raw is None:
            raise ContextNotFound(
                f"no context stored under {ref!r}; contexts live context_ttl_s={self.ttl_s}s"
            )
        data: dict[str, Any] = loads(raw)
        return data

    async def save(self, trace_id: str, data: dict[str, Any]) -> str:
        """Store `data` as the trace's next context version; returns its reference."""
        version = int(await self.redis.incr(self.keys.context_version(trace_id)))
        await self.redis.expire(self.keys.context_version(trace_id), self.ttl_s)
        await self.redis.set(self.keys.context(trace_id, version), dumps(data), ex=self.ttl_s)
        return make_ref(trace_id, version)


__all__ = ["ContextNotFound", "ContextStore", "make_ref", "parse_ref"]
