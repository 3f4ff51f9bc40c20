"""Agent-Reach: a message-queue native worker mesh for AI agents, on RabbitMQ.

The public API is this list; everything else may change.
"""

from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.errors import (
    ConfigError,
    MeshError,
    NotStarted,
    RegistryError,
    Reject,
    RequestTimeout,
    Retry,
    ServiceUnavailable,
    StaleFencingToken,
)
from mesh.topology import Topology
from mesh.worker.agent import Agent
from mesh.worker.context import TaskContext
from mesh.worker.runtime import WorkerRuntime

__all__ = [
    "Agent",
    "ConfigError",
    "MeshClient",
    "MeshConnection",
    "MeshError",
    "NotStarted",
    "RegistryError",
    "Reject",
    "RequestTimeout",
    "Retry",
    "ServiceUnavailable",
    "Settings",
    "StaleFencingToken",
    "TaskContext",
    "Topology",
    "WorkerRuntime",
    "connect",
]
