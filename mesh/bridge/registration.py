"""A registration file: the routing texts, tags and contract of a bridged agent as JSON.

``mesh bridge http AGENT_ID --registration FILE`` reads a JSON object holding what a
Python `mesh.Agent` declares (``name``, ``version``, ``capability_text``, ``examples``,
``keywords``, ``tags``, ``supported_tasks``, ``priority_bonus``, ``input_schema``,
``output_schema``; every one optional but a capability text from somewhere), checked as
the registry checks a registration (unknown keys refused). `registration_document` writes
one from an `Agent`, so an agent declared in Python can run behind the bridge with all of
its registration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mesh.errors import ConfigError
from mesh.schemas.registration import Registration
from mesh.worker.agent import Agent

#: the `Registration` fields a file may give (the rest belong to the instance or the bridge)
FILE_FIELDS = (
    "name",
    "version",
    "capability_text",
    "examples",
    "keywords",
    "tags",
    "supported_tasks",
    "priority_bonus",
    "input_schema",
    "output_schema",
)
#: stands in for the capability text while a file without one is checked
_NO_TEXT = "-"


def load_registration(path: str, agent_id: str) -> dict[str, Any]:
    """The `Agent` keyword arguments of the registration file at `path` (only those it gives).

    Raises:
        ConfigError: the file cannot be read, is not a JSON object, names another agent,
            holds an unknown key or a value the registry would refuse.
    """
    try:
        raw: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read the registration {path}: {exc} (--registration)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the registration {path} is not JSON: {exc} (--registration)") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"the registration {path} is not a JSON object (--registration)")
    named = raw.pop("agent_id", agent_id)
    if named != agent_id:
        raise ConfigError(
            f"the registration {path} is agent {named!r}, not {agent_id!r} (--registration)"
        )
    unknown = sorted(set(raw) - set(FILE_FIELDS))
    if unknown:
        raise ConfigError(
            f"the registration {path} has unknown key(s) {', '.join(unknown)}; known: "
            f"{', '.join(FILE_FIELDS)} (--registration)"
        )
    try:
        Registration.model_validate(
            {"capability_text": _NO_TEXT, **raw, "agent_id": agent_id, "instance_id": "file"}
        )
    except ValidationError as exc:
        raise ConfigError(f"the registration {path}: {exc} (--registration)") from None
    return dict(raw)


def registration_document(agent: Agent) -> dict[str, Any]:
    """The registration file of `agent` (a JSON object `load_registration` reads back)."""
    reg = agent.registration("file").model_dump(mode="json")
    return {"agent_id": agent.agent_id, **{key: reg[key] for key in FILE_FIELDS}}


__all__ = ["FILE_FIELDS", "load_registration", "registration_document"]
