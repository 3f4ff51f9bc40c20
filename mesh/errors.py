"""The one error tree of the mesh. Every message names the setting or command that fixes it."""

from __future__ import annotations

from typing import Any


class MeshError(Exception):
    """Base of every error the mesh raises on purpose."""


class ConfigError(MeshError, ValueError):
    """A setting is missing or does not parse."""


class NotStarted(MeshError, RuntimeError):
    """An object was used before `start()` (or after `close()`)."""


class ServiceUnavailable(MeshError, ConnectionError):
    """RabbitMQ or Redis could not be reached at start-up."""

    def __init__(self, service: str, masked_url: str, hint: str) -> None:
        self.service = service
        self.masked_url = masked_url
        self.hint = hint
        super().__init__(f"{service} at {masked_url} is unreachable; {hint}")


class RegistryError(MeshError):
    """A registry operation failed."""


class StaleFencingToken(RegistryError):
    """This instance's fencing token is no longer the current one: its lease was lost."""

    def __init__(self, agent_id: str, token: int, current: int | None) -> None:
        self.agent_id = agent_id
        self.token = token
        self.current = current
        super().__init__(
            f"fencing token {token} of agent {agent_id!r} is stale (current: {current}); "
            "the lease was lost and another session holds it"
        )


class EffectUnknown(MeshError):
    """A side effect guarded by `apply_once` cannot be applied safely: the task's record was
    lost (Redis restarted without persistence) after the task may already have run, so
    whether the effect happened is unknown. The task fails with code ``effect_unknown``
    instead of risking a second application; run Redis with AOF to avoid it."""

    code = "effect_unknown"

    def __init__(self, task_id: str, name: str) -> None:
        self.task_id = task_id
        self.name = name
        super().__init__(
            f"side effect {name!r} of task {task_id} not applied: the task's record was lost "
            "after it may have run (Redis restarted without persistence), so whether the effect "
            "happened is unknown; check it by hand"
        )


class PublishNacked(MeshError, ConnectionError):
    """The broker nacked a confirmed publish (a quorum queue electing a new leader, a node
    going down): transient, the publish is tried again like any connection error."""


class Unhealthy(MeshError):
    """`mesh health`: what makes the checked role unhealthy, in one sentence."""


class RequestTimeout(MeshError, TimeoutError):
    """No Result arrived before the client's wait ended."""


class DownstreamBusy(MeshError):
    """A handoff's target has its circuit breaker open: the router answered at once
    (``downstream_busy``) instead of letting the task wait on an agent that fails. A handler
    catches it to answer with a degraded reply."""

    def __init__(self, target: str, message: str = "") -> None:
        self.target = target
        super().__init__(message or f"agent {target!r} is failing (its breaker is open)")


class NoRouter(MeshError, ConnectionError):
    """No router consumes the router queue and no local rule of the client takes the task."""

    def __init__(self, queue: str, task_id: str, reason: str = "") -> None:
        self.queue = queue
        self.task_id = task_id
        self.reason = reason
        super().__init__(
            f"no router consumes {queue}{reason}, so task_id={task_id} is not routed: "
            "check the routers with `mesh health router` (start one with `mesh router`)"
        )


class Retry(MeshError):
    """Raised by a handler: try this task again later (at most `max_retries` times).

    The task waits in one of the delay queues (``MESH_RETRY_DELAYS_MS``, by default 1000,
    5000 and 30000 ms), so `delay_ms` is a minimum: it is rounded *up* to the next delay
    queue (``delay_ms=200`` waits 1000 ms, ``delay_ms=2000`` waits 5000 ms), and a delay
    above the longest waits the longest. The ``task.retrying`` event and the worker's log
    line say both the delay asked for and the one taken. Without `delay_ms`, retry number
    *n* waits the *n*-th delay (then the longest).

    Raises:
        ValueError: `delay_ms` is below 1.
    """

    def __init__(self, reason: str = "retry requested", delay_ms: int | None = None) -> None:
        if delay_ms is not None and delay_ms < 1:
            raise ValueError(f"Retry(delay_ms=...) must be at least 1 ms, got {delay_ms}")
        self.reason = reason
        self.delay_ms = delay_ms
        super().__init__(reason)


class Reject(MeshError):
    """Raised by a handler: this task is not for me; the router tries the next candidate."""

    def __init__(self, reason: str = "rejected") -> None:
        self.reason = reason
        super().__init__(reason)


class Fail(MeshError):
    """Raised by a handler: the task failed for a reason its caller can act on. The Result
    is ``failed`` with this `code` (stable, machine-readable, 1..64 characters), `message`
    and `details`; it is not retried (raise `Retry` for that)."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        self.code = code[:64] or "failed"
        self.message = message
        self.details = dict(details or {})
        super().__init__(f"{self.code}: {message}")


class RegistryUnavailable(RegistryError, TimeoutError):
    """No registry answered a registration in time; run one with `mesh registry`."""


class ContextNotFound(MeshError, KeyError):
    """A context_ref that names no stored context (expired after its TTL, or mistyped)."""


class UnknownTask(MeshError, LookupError):
    """No routing record for that task_id (never routed semantically, or older than 24 h)."""


class HumanTaskError(MeshError, LookupError):
    """A task of the human queue cannot be taken or answered: not waiting for a person
    (answered, never handed over, expired), or taken by someone else."""


class CalibrationDataError(MeshError, ValueError):
    """A calibration input file is missing or malformed; the message names file and line."""


class AccessError(MeshError):
    """Provisioning or revoking broker users and Redis ACL users failed."""


class ManagementRequestFailed(AccessError):
    """The RabbitMQ management API answered a request with an error status."""

    def __init__(self, method: str, path: str, status: int, reason: str) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.reason = reason
        super().__init__(
            f"the RabbitMQ management API refused {method} {path} (HTTP {status}): {reason}"
        )


class VhostMissing(AccessError, ConfigError):
    """The vhost to provision does not exist and ``--create-vhost`` was not given."""


class UserConflict(AccessError):
    """A broker or Redis user of that name exists and was not created by `mesh access`."""


class TenantConflict(AccessError):
    """Users of another tenant (or another user prefix) may reach the keys of this one."""


class RedisAclRefused(AccessError):
    """The Redis user of ``MESH_REDIS_URL`` may not manage ACL users."""


class RedisFunctionsMissing(MeshError, LookupError):
    """Redis lacks a function library of the mesh and this login may not load it."""

    def __init__(self, library: str) -> None:
        self.library = library
        super().__init__(
            f"Redis has no function library {library!r} and this login may not load it: "
            "run `mesh access provision` (it loads the mesh's Redis functions as the "
            "operator) after every upgrade and after Redis lost its data"
        )


class FitInterrupted(MeshError):
    """A head fit given up part way: it was asked to yield (the load it waited out came
    back), so what it fitted so far is dropped."""


class FitProcessLost(MeshError):
    """The router's fit process exited, or answered out of turn, during a fit: that fit is
    lost and the next one starts a new process (`mesh.router.fits`)."""


__all__ = [
    "AccessError",
    "CalibrationDataError",
    "ConfigError",
    "ContextNotFound",
    "DownstreamBusy",
    "EffectUnknown",
    "FitInterrupted",
    "FitProcessLost",
    "HumanTaskError",
    "ManagementRequestFailed",
    "MeshError",
    "NoRouter",
    "NotStarted",
    "PublishNacked",
    "RedisAclRefused",
    "RedisFunctionsMissing",
    "RegistryError",
    "RegistryUnavailable",
    "Reject",
    "RequestTimeout",
    "Retry",
    "ServiceUnavailable",
    "StaleFencingToken",
    "TenantConflict",
    "Unhealthy",
    "UnknownTask",
    "UserConflict",
    "VhostMissing",
]
