"""A bench's broker and Redis counters: AMQP messages published per process, Redis commands.

AMQP: the management API's per-channel ``message_stats.publish`` summed by connection, and
the connections of one namespace told apart by their ``connection_name``
(``<namespace>/<role>/<host>:<pid>``, `mesh.connection.MeshConnection.connection_name`; the
raw pipeline names its connections the same way). The broker refreshes these counters every
``collect_statistics_interval`` (5 s by default), so a reading is only complete once the
load has stopped for that long: `settled_published` waits for it.

Redis: ``INFO stats`` (``total_commands_processed``: every command, each one inside a
MULTI/EXEC or a pipeline counted, MULTI and EXEC included, and each ``redis.call`` of a Lua
script as well as its EVALSHA; ``total_reads_processed``: socket reads, about one per round
trip, a pipeline being one) and ``INFO commandstats`` by command (the same counting).
Both are the whole server's: another client of the same Redis is counted too.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from mesh.config import Settings

#: the broker's default ``collect_statistics_interval`` plus its collector's round
STATS_LAG_S = 6.0


def _get(settings: Settings, path: str) -> Any:
    url = settings.management_url.get_secret_value()
    parts = urllib.parse.urlsplit(url)
    auth = f"{urllib.parse.unquote(parts.username or 'guest')}:"
    auth += urllib.parse.unquote(parts.password or "guest")
    base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
    request = urllib.request.Request(
        base + path, headers={"Authorization": "Basic " + base64.b64encode(auth.encode()).decode()}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.loads(answer.read() or b"null")


def pid_of(connection_name: str, namespace: str) -> int | None:
    """The pid in ``<namespace>/<role>/<host>:<pid>``, None for another namespace's."""
    if not connection_name.startswith(f"{namespace}/"):
        return None
    _, _, pid = connection_name.rpartition(":")
    return int(pid) if pid.isdigit() else None


def published(settings: Settings, namespace: str) -> dict[int, int]:
    """Messages published so far by each process (pid) with a connection in `namespace`
    (blocking: call it from a thread)."""
    names: dict[str, str] = {}
    for c in _get(settings, "/api/connections?columns=name,client_properties") or []:
        props = c.get("client_properties") or {}
        names[c["name"]] = str(props.get("connection_name") or "")
    found: dict[int, int] = {}
    for ch in _get(settings, "/api/channels?columns=connection_details,message_stats") or []:
        conn = (ch.get("connection_details") or {}).get("name", "")
        pid = pid_of(names.get(conn, ""), namespace)
        if pid is None:
            continue
        count = int((ch.get("message_stats") or {}).get("publish", 0))
        found[pid] = found.get(pid, 0) + count
    return found


async def _published_or_none(settings: Settings, namespace: str) -> dict[int, int] | None:
    try:
        return await asyncio.to_thread(published, settings, namespace)
    except (urllib.error.URLError, OSError):  # HTTPError is a URLError; a blip loses a reading
        return None


async def settled_published(
    settings: Settings, namespace: str, since: float, max_wait_s: float = 3 * STATS_LAG_S
) -> dict[int, int] | None:
    """`published` once the broker's counters caught up with a load that stopped at
    `since` (time.monotonic()): at least STATS_LAG_S later and unchanged for 1 s; None when
    the management API did not answer within `max_wait_s`."""
    await asyncio.sleep(max(0.0, since + STATS_LAG_S - time.monotonic()))
    end = time.monotonic() + max_wait_s
    last = await _published_or_none(settings, namespace)
    while time.monotonic() < end:
        await asyncio.sleep(1.0)
        now = await _published_or_none(settings, namespace)
        if now is not None and now == last:
            return now
        last = now
    return last


async def published_now(settings: Settings, namespace: str) -> dict[int, int] | None:
    """`published` now, None when the management API does not answer."""
    return await _published_or_none(settings, namespace)


def by_name(counts: Mapping[int, int], pids: Mapping[str, int]) -> dict[str, int]:
    """Per-pid counts under the names of `pids` (name -> pid); pids not named are dropped."""
    return {name: counts[pid] for name, pid in pids.items() if pid in counts}


def count_delta(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """`after` - `before` per name (a name absent before counts from 0)."""
    return {name: value - before.get(name, 0) for name, value in after.items()}


async def redis_counters(redis: Any) -> dict[str, int]:
    """``commands``, ``reads`` and ``cmd:<name>`` counters of the whole Redis server."""
    stats = await redis.info("stats")
    found = {
        "commands": int(stats.get("total_commands_processed", 0)),
        "reads": int(stats.get("total_reads_processed", 0)),
    }
    for key, value in (await redis.info("commandstats")).items():
        if key.startswith("cmdstat_") and isinstance(value, dict):
            found[f"cmd:{key.removeprefix('cmdstat_')}"] = int(value.get("calls", 0))
    return found
