"""The mesh's AMQP plumbing shared by every role: `Subscriber` and its settle policies."""

from mesh.wire.consume import (
    AckAfter,
    AckBatched,
    BugAction,
    Declare,
    Handler,
    Manual,
    NoAck,
    OutageBackoff,
    SettlePolicy,
    Subscriber,
)

__all__ = [
    "AckAfter",
    "AckBatched",
    "BugAction",
    "Declare",
    "Handler",
    "Manual",
    "NoAck",
    "OutageBackoff",
    "SettlePolicy",
    "Subscriber",
]
