"""The mesh's AMQP plumbing shared by every role: `Subscriber` and its settle policies, and
`BandedSubscriber`, which drains priority bands by weight."""

from mesh.wire.bands import BandedSubscriber, BandGate, BandHandler
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
    "BandGate",
    "BandHandler",
    "BandedSubscriber",
    "BugAction",
    "Declare",
    "Handler",
    "Manual",
    "NoAck",
    "OutageBackoff",
    "SettlePolicy",
    "Subscriber",
]
