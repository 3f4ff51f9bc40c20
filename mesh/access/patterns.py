r"""Regex atoms of broker names and routing keys, for permission regexes (unanchored).

Pure. Every name comes from `mesh.topology.Topology` (a builder called with a sentinel
where only its prefix is wanted) and is escaped with ``re.escape``; `mesh.contract`
(the rows' grants) and `mesh.access.roles` (admin, the dead-letter policy) use them, and
`mesh.access.roles.anchored` anchors them.
"""

from __future__ import annotations

import re

from mesh.topology import DEAD_REASONS, PRIORITY_BANDS, Topology

#: topic-permission regex matching every routing key (unanchored, as RabbitMQ's default)
ANY_KEY = ".*"
_SENTINEL = "\x00"


def lit(name: str) -> str:
    """A regex atom matching `name` exactly."""
    return re.escape(name)


def starting(prefix: str) -> str:
    """A regex atom matching every name that starts with `prefix`."""
    return re.escape(prefix) + ".*"


def _cut(built: str) -> str:
    """What a name built with `_SENTINEL` has before it."""
    return built[: built.index(_SENTINEL)]


def dispatch_key_prefix(topology: Topology) -> str:
    """What every `Topology.agent_routing_key` starts with (``agent.``)."""
    return _cut(topology.agent_routing_key(_SENTINEL))


def bands() -> str:
    """The optional band suffix of an agent queue or dispatch key (quorum mode)."""
    return r"(?:\.(?:" + "|".join(re.escape(band) for band, _ in PRIORITY_BANDS) + r"))?"


def agent_key_regex(topology: Topology, agent_id: str) -> str:
    """Dispatch routing keys of `agent_id` in either queue mode (without anchors)."""
    return re.escape(dispatch_key_prefix(topology) + agent_id) + bands()


def retry_key_regex(topology: Topology, agent_id: str) -> str:
    """Keys of the retry exchange for `agent_id`: ``<delay>.`` + its dispatch key."""
    return r"[0-9]+\." + agent_key_regex(topology, agent_id)


def reply_queue_prefix(topology: Topology, user: str) -> str:
    """Reply queues of a user are ``Topology.reply_queue("<user>.<client-id>")``."""
    return topology.reply_queue(f"{user}.")


#: one segment of a name (no dot): the id that ends a reply queue's name, so that user
#: ``web`` owns ``<ns>.reply.web.<id>`` and nothing of user ``web.eu``
SEGMENT = r"[^.]+"


def _own_reply(prefix: str, agent: str | None) -> str:
    if agent is None:
        return re.escape(prefix) + SEGMENT
    # a worker's reply queue is named after an instance: ``<agent_id>-<suffix>``
    return re.escape(f"{prefix}{agent}-") + "[^.]*"


def reply_queue_regex(topology: Topology, user: str, agent: str | None = None) -> str:
    """The reply queues of `user`, by exact name: ``<ns>.reply.<user>.<id>`` with an id of
    one segment (`SEGMENT`), or for a worker of `agent` an instance id ``<agent>-<suffix>``
    with a suffix of one segment (``[^.]*``): a user whose name extends another's by a dot
    (``web.eu`` of ``web``) matches none of the other's queues."""
    return _own_reply(reply_queue_prefix(topology, user), agent)


def reply_key_regex(topology: Topology, user: str, agent: str | None = None) -> str:
    """The routing keys of `reply_queue_regex`'s queues (``reply.<user>.<id>``)."""
    return _own_reply(reply_key_prefix(topology, user), agent)


def reply_key_prefix(topology: Topology, user: str | None = None) -> str:
    """Reply keys of `user`'s queues (None: every reply key)."""
    queue = topology.reply_queue("" if user is None else f"{user}.")
    key = topology.reply_key(queue)
    assert key is not None  # a reply queue of this topology always has its key
    return key


def session_key_prefix(topology: Topology, agent_id: str | None = None) -> str:
    """Registry answers to instances of `agent_id` (instance ids start ``<agent_id>-``;
    None: every session key)."""
    if agent_id is None:
        return _cut(topology.session_key(_SENTINEL, _SENTINEL))
    return topology.session_key(agent_id, f"{agent_id}-")


def events_of(*families: str) -> str:
    """Event routing keys of these families (event types are ``<family>.<name>``)."""
    return "(?:" + "|".join(re.escape(x) for x in families) + r")\..*"


def binding_keys(keys: tuple[str, ...]) -> tuple[str, ...]:
    """Topic-read atoms of binding keys: ``<family>.#`` allows every binding key of that
    family (it reaches only routing keys whose first word is the family), any other key
    only itself."""
    return tuple(events_of(k[:-2]) if k.endswith(".#") else lit(k) for k in keys)


def dead_keys(topology: Topology) -> str:
    """The dead-letter routing keys of every reason (`Topology.dead_key`)."""
    return "(?:" + "|".join(re.escape(topology.dead_key(r)) for r in DEAD_REASONS) + ")"
