"""Agent-Reach: a message-queue native worker mesh for AI agents, on RabbitMQ.

The public API is this list; everything else may change. `Observer` is imported when first
used: it shares the router's outcome tables, and a worker process loads no router module.
"""

from typing import TYPE_CHECKING, Any

from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.errors import (
    CalibrationDataError,
    ConfigError,
    ContextNotFound,
    DownstreamBusy,
    EffectUnknown,
    Fail,
    MeshError,
    NoRouter,
    NotStarted,
    RegistryError,
    RegistryUnavailable,
    Reject,
    RequestTimeout,
    Retry,
    ServiceUnavailable,
    StaleFencingToken,
    UnknownTask,
)
from mesh.topology import Topology
from mesh.worker.agent import Agent
from mesh.worker.context import TaskContext
from mesh.worker.middleware import TaskRun, WorkerMiddleware
from mesh.worker.outcome import Outcome
from mesh.worker.runtime import WorkerRuntime

if TYPE_CHECKING:
    from mesh.observer import Observer


def __getattr__(name: str) -> Any:
    """The lazy exports (`Observer`)."""
    if name == "Observer":
        from mesh.observer import Observer

        return Observer
    raise AttributeError(f"module 'mesh' has no attribute {name!r}")


__all__ = [
    "Agent",
    "CalibrationDataError",
    "ConfigError",
    "ContextNotFound",
    "DownstreamBusy",
    "EffectUnknown",
    "Fail",
    "MeshClient",
    "MeshConnection",
    "MeshError",
    "NoRouter",
    "NotStarted",
    "Observer",
    "Outcome",
    "RegistryError",
    "RegistryUnavailable",
    "Reject",
    "RequestTimeout",
    "Retry",
    "ServiceUnavailable",
    "Settings",
    "StaleFencingToken",
    "TaskContext",
    "TaskRun",
    "Topology",
    "UnknownTask",
    "WorkerMiddleware",
    "WorkerRuntime",
    "connect",
]
