"""Logging set-up of the `mesh` command: level and format from the settings.

``MESH_LOG_LEVEL`` (``DEBUG``..``ERROR``; default WARNING, or what ``-v``/``-vv`` ask) and
``MESH_LOG_FORMAT`` (``text``, or ``json``: one object per line with ``ts``, ``level``,
``logger``, ``message``, the ``task_id`` and ``trace_id`` a line is about, and ``exc``).
Broker frame dumps (aiormq, aio-pika's reconnect chatter) stay off below ``-vv``: the mesh
says what matters in one sentence (`mesh.outage`: one WARNING when the broker or Redis is
lost, one INFO when it is back). The connection-error noise of the libraries' internals --
aio-pika's "Callback ... error" of every channel of a lost connection, asyncio's
"Exception in callback" or "Future exception was never retrieved" for a lost socket -- is
dropped at every level (`ConnectionNoise`); any other error they log is kept.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from mesh.outage import connection_failure

#: loggers that report what the mesh says again in one sentence (shown with -vv)
NOISY_LOGGERS = ("aiormq.connection", "aio_pika.robust_connection", "aio_pika.connection")

#: loggers whose records about a lost connection `ConnectionNoise` drops
NOISE_LOGGERS = ("aio_pika.tools", "asyncio")

_IDS = re.compile(r"\b(task_id|trace_id)=([A-Za-z0-9_.@-]+(?::[A-Za-z0-9_.@-]+)*)")


class JsonFormatter(logging.Formatter):
    """One JSON object per record; ids from the record's extras or its message."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        for name, value in _IDS.findall(message):
            entry.setdefault(name, value)
        for name in ("task_id", "trace_id"):
            value = getattr(record, name, None)
            if value:
                entry[name] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class ConnectionNoise(logging.Filter):
    """Drops a library's record about a lost broker or Redis connection (the mesh says it
    once, `mesh.outage`): aio-pika's callback errors, asyncio's unhandled-exception lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        for exc in _errors_of(record):
            if connection_failure(exc) is not None or _closed_transport(exc):
                return False
        return True


def _errors_of(record: logging.LogRecord) -> list[BaseException]:
    found = [a for a in (record.args or ()) if isinstance(a, BaseException)]
    if isinstance(record.args, dict):
        found += [a for a in record.args.values() if isinstance(a, BaseException)]
    if record.exc_info and record.exc_info[1] is not None:
        found.append(record.exc_info[1])
    return found


def _closed_transport(exc: BaseException) -> bool:
    # aio-pika's own words for a connection or channel that went away under a callback
    text = str(exc)
    return isinstance(exc, RuntimeError) and (
        text.endswith(" closed") or "No active transport" in text
    )


_NOISE = ConnectionNoise()


def quiet_connection_noise() -> None:
    """Add `ConnectionNoise` to the libraries' loggers (once; what `configure` and every
    `mesh.connect` do, so a program with its own logging set-up gets it too)."""
    for name in NOISE_LOGGERS:
        noisy = logging.getLogger(name)
        if _NOISE not in noisy.filters:
            noisy.addFilter(_NOISE)


def configure(level_name: str | None, log_format: str, verbose: int) -> None:
    """Set up the root logger once for a `mesh` command."""
    level = logging.WARNING - 10 * min(verbose, 2)
    if level_name:
        level = logging.getLevelName(level_name.upper())
        if not isinstance(level, int):
            level = logging.WARNING
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    quiet_connection_noise()
    if verbose < 2:
        for noisy in NOISY_LOGGERS:
            logging.getLogger(noisy).setLevel(logging.CRITICAL)


__all__ = [
    "NOISE_LOGGERS",
    "NOISY_LOGGERS",
    "ConnectionNoise",
    "JsonFormatter",
    "configure",
    "quiet_connection_noise",
]
