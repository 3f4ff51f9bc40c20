"""Logging set-up of the `mesh` command: level and format from the settings.

``MESH_LOG_LEVEL`` (``DEBUG``..``ERROR``; default WARNING, or what ``-v``/``-vv`` ask) and
``MESH_LOG_FORMAT`` (``text``, or ``json``: one object per line with ``ts``, ``level``,
``logger``, ``message``, the ``task_id`` and ``trace_id`` a line is about, and ``exc``).
Broker frame dumps (aiormq, aio-pika's reconnect chatter) stay off below ``-vv``: the mesh
says what matters in one sentence.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

#: loggers that report what the mesh says again in one sentence (shown with -vv)
NOISY_LOGGERS = ("aiormq.connection", "aio_pika.robust_connection", "aio_pika.connection")

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
    if verbose < 2:
        for noisy in NOISY_LOGGERS:
            logging.getLogger(noisy).setLevel(logging.CRITICAL)


__all__ = ["NOISY_LOGGERS", "JsonFormatter", "configure"]
