"""The base every wire model shares: frozen, unknown fields refused."""

from __future__ import annotations

import time
import uuid

from pydantic import BaseModel, ConfigDict

#: version of the wire contracts; bumped on an incompatible change
SCHEMA_VERSION = 1


class WireModel(BaseModel):
    """A message on the wire: immutable, strict about unknown fields."""

    model_config = ConfigDict(frozen=True, extra="forbid", str_max_length=1 << 20)


def new_id() -> str:
    """A fresh random identifier (32 hex characters)."""
    return uuid.uuid4().hex


def now_ms() -> int:
    """Wall-clock time in epoch milliseconds, the unit of every `*_ms` timestamp."""
    return time.time_ns() // 1_000_000
