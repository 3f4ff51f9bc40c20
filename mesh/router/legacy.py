"""The single router queue of releases before the priority bands, reported at start.

That queue (`Topology.legacy_router_queue`) stays bound to ingress and to the dead-letter
exchange after an upgrade: with no consumer, it keeps a copy of every task published with
the bare key, and of every dispatch coming back, and grows until it is deleted. A router
that finds it logs an error naming it, its depth and the fix (README: Priorities,
upgrading); it routes on regardless.
"""

from __future__ import annotations

import logging

import aio_pika.exceptions
import aiormq.exceptions

from mesh.connection import MeshConnection
from mesh.retrying import quietly

logger = logging.getLogger(__name__)


async def legacy_router_queue(conn: MeshConnection) -> int | None:
    """The messages in the pre-band router queue, or None when it is not on the broker
    (or this user may not look)."""
    name = conn.topology.legacy_router_queue
    channel = await conn.channel(confirms=False)
    try:
        declared = await channel.declare_queue(name, passive=True)
    except (aio_pika.exceptions.ChannelNotFoundEntity, aiormq.exceptions.ChannelAccessRefused):
        return None  # the refusal closed the throwaway channel
    count = int(declared.declaration_result.message_count or 0)
    await quietly(channel.close())
    return count


async def report_legacy_router_queue(conn: MeshConnection) -> int | None:
    """Log an error when the pre-band router queue is still there; returns its depth."""
    count = await legacy_router_queue(conn)
    if count is not None:
        topology = conn.topology
        logger.error(
            "queue %s is left from a release before the priority bands, with %d message(s): "
            "nobody consumes it, and it still copies every task published with key %r and "
            "every dispatch coming back; shovel what it holds to exchange %s (key %s.normal) "
            "and delete it (README: Priorities, upgrading)",
            topology.legacy_router_queue,
            count,
            topology.ingress_key,
            topology.ingress,
            topology.ingress_key,
        )
    return count


__all__ = ["legacy_router_queue", "report_legacy_router_queue"]
