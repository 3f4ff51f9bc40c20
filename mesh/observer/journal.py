"""The observer's JSON-lines logs, each rotated by size (`RotatingFileHandler`).

In `Settings.observer_log_dir`:

- ``trace.jsonl``: every event of a task or trace (``task.*``, ``route.*`` but decisions,
  ``alert.*``, ``agent.up`` / ``agent.down``), one per line as it travelled, with
  ``observed_ms`` and ``by`` (the publisher's broker user);
- ``decisions.jsonl``: every ``route.decision``, with all candidates' score parts
  ("why A and not B");
- ``alerts.jsonl``: every alert transition (raised, cleared, relayed from a worker).

Each file rotates at `Settings.observer_log_max_bytes` and keeps
`Settings.observer_log_backups` old files (``trace.jsonl.1`` ...). The files are opened
by `start()`, not at construction.
"""

from __future__ import annotations

import logging
import logging.handlers
from pathlib import Path
from typing import Any

from mesh.errors import ConfigError
from mesh.observer.alerts import Alert
from mesh.schemas import Event, now_ms
from mesh.schemas.codec import dumps

STREAMS = ("trace", "decisions", "alerts")
#: ``agent.leases`` batches renewals: frequent and of no use in a log
NOT_LOGGED = frozenset({"agent.leases"})


class Journal:
    def __init__(self, directory: Path, max_bytes: int, backups: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes
        self.backups = backups
        self._handlers: dict[str, logging.Handler] = {}

    @classmethod
    def from_settings(cls, settings: Any) -> Journal:
        return cls(
            Path(settings.observer_log_dir),
            settings.observer_log_max_bytes,
            settings.observer_log_backups,
        )

    def path(self, stream: str) -> Path:
        return self.directory / f"{stream}.jsonl"

    def start(self) -> None:
        """Create the folder and open the three files (appending)."""
        if self._handlers:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            for stream in STREAMS:
                handler = logging.handlers.RotatingFileHandler(
                    self.path(stream),
                    maxBytes=self.max_bytes,
                    backupCount=self.backups,
                    encoding="utf-8",
                )
                handler.setFormatter(logging.Formatter("%(message)s"))
                self._handlers[stream] = handler
        except OSError as exc:
            self.close()
            raise ConfigError(
                f"the observer cannot write its logs in {self.directory} ({exc.strerror}): "
                "set MESH_OBSERVER_LOG_DIR to a writable folder"
            ) from None

    def event(self, event: Event, user_id: str | None = None) -> None:
        if event.type in NOT_LOGGED:
            return
        line: dict[str, Any] = {
            "observed_ms": now_ms(),
            "by": user_id,
            **event.model_dump(mode="json"),
        }
        self._write("decisions" if event.type == "route.decision" else "trace", line)

    def alert(self, alert: Alert) -> None:
        self._write("alerts", alert.as_dict())

    def _write(self, stream: str, line: dict[str, Any]) -> None:
        handler = self._handlers.get(stream)
        if handler is None:
            return
        record = logging.makeLogRecord({"msg": dumps(line).decode(), "levelno": logging.INFO})
        handler.handle(record)

    def close(self) -> None:
        handlers, self._handlers = self._handlers, {}
        for handler in handlers.values():
            handler.close()


__all__ = ["STREAMS", "Journal"]
