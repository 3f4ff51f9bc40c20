"""The mesh's AMQP plumbing shared by every role: `Subscriber` and its settle policies,
`BandedSubscriber`, which drains priority bands by weight, and `each_event` / `events_of`,
the one reader of the events exchange's deliveries (an event or a batch)."""

from mesh.wire.bands import BandedSubscriber, BandGate, BandHandler
from mesh.wire.consume import (
    AckAfter,
    AckBatched,
    BugAction,
    Declare,
    EventHandler,
    Handler,
    Manual,
    NoAck,
    OutageBackoff,
    SettlePolicy,
    Subscriber,
    Unreadable,
    each_event,
    events_of,
    is_batch,
)

__all__ = [
    "AckAfter",
    "AckBatched",
    "BandGate",
    "BandHandler",
    "BandedSubscriber",
    "BugAction",
    "Declare",
    "EventHandler",
    "Handler",
    "Manual",
    "NoAck",
    "OutageBackoff",
    "SettlePolicy",
    "Subscriber",
    "Unreadable",
    "each_event",
    "events_of",
    "is_batch",
]
