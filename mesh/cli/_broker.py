"""Broker facts the CLI checks before it acts, and broker refusals as one sentence.

`require_namespace` keeps a mistyped ``MESH_NAMESPACE`` from quietly creating a second,
empty mesh: a command that would declare topology first asks the broker (a passive
declare of the ingress exchange on a throwaway channel) and refuses unless ``--create``.
"""

from __future__ import annotations

import logging
import re

import aio_pika
import aiormq.exceptions

from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.errors import ConfigError
from mesh.topology import Topology

logger = logging.getLogger(__name__)

_INEQUIVALENT = re.compile(
    r"inequivalent arg '(?P<arg>[^']+)' for (?P<kind>queue|exchange) '(?P<name>[^']+)'"
    r".*?: (?P<detail>.*)$"
)


class NamespaceMissing(ConfigError):
    """The namespace has no topology on the broker and ``--create`` was not given."""


async def namespace_exists(conn: MeshConnection) -> bool:
    """Whether the broker has the namespace's ingress exchange (a passive declare)."""
    channel = await conn.channel(confirms=False)
    try:
        await channel.declare_exchange(conn.topology.ingress, passive=True)
    except aio_pika.exceptions.ChannelNotFoundEntity:
        return False  # the 404 closed the throwaway channel
    if not channel.is_closed:
        await channel.close()
    return True


async def require_namespace(conn: MeshConnection, *, create: bool, can_create: bool = True) -> None:
    """Refuse (one sentence) to work in a namespace the broker does not have, unless `create`.

    Raises:
        NamespaceMissing: the ingress exchange is absent and `create` is false.
    """
    if await namespace_exists(conn):
        return
    ns = conn.settings.namespace
    if not create:
        raise NamespaceMissing(
            f"namespace {ns!r} does not exist on RabbitMQ at {conn.settings.amqp_url_masked} "
            f"(no exchange {conn.topology.ingress}): check MESH_NAMESPACE or start "
            f"`mesh router` there{', or pass --create' if can_create else ''}"
        )
    logger.warning("namespace %r does not exist yet: declaring it (--create)", ns)


def describe_channel_error(exc: aio_pika.exceptions.AMQPError, settings: Settings) -> str:
    """A broker refusal (PRECONDITION_FAILED, ACCESS_REFUSED, NOT_FOUND...) as one sentence."""
    text = str(exc.args[0]) if exc.args else str(exc)
    ns = settings.namespace
    if isinstance(exc, aio_pika.exceptions.ChannelPreconditionFailed):
        match = _INEQUIVALENT.search(text)
        if match is not None and ".dead." in match["name"]:
            return (
                f"RabbitMQ refused to redeclare {match['name']!r}: its argument "
                f"{match['arg']} differs ({match['detail']}): the dead-letter queues are "
                "bounded by MESH_DEAD_LETTER_MAX_LENGTH and MESH_DEAD_LETTER_TTL_S, and this "
                "one was declared with other bounds (or none, by an older version): replay "
                "or purge it (mesh dlq), delete it (rabbitmqctl delete_queue), then start again"
            )
        if match is not None:
            return (
                f"RabbitMQ refused to redeclare {match['kind']} {match['name']!r}: its "
                f"argument {match['arg']} differs ({match['detail']}), so namespace {ns!r} "
                "was created with other queue settings (MESH_QUEUE_TYPE, MESH_DELIVERY_LIMIT): "
                "run with the settings it was created with, or use a new MESH_NAMESPACE"
            )
        return f"RabbitMQ refused a declaration in namespace {ns!r}: {text}"
    if isinstance(exc, aiormq.exceptions.ChannelAccessRefused):
        return (
            f"RabbitMQ at {settings.amqp_url_masked} refused access ({text}): grant the "
            f"user configure/write/read permissions on {ns}.* (rabbitmqctl set_permissions)"
        )
    if isinstance(exc, aio_pika.exceptions.ChannelNotFoundEntity):
        return f"RabbitMQ has no such entity in namespace {ns!r} ({text}): check MESH_NAMESPACE"
    return f"RabbitMQ at {settings.amqp_url_masked} failed: {text or type(exc).__name__}"


def topology_of(settings: Settings) -> Topology:
    """The names of `settings`' namespace (for messages printed after the connection closed)."""
    return Topology.from_settings(settings)
