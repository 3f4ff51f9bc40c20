"""Agents described by an A2A Agent Card: the card's name, description and skills become
the agent's capability text, examples and keywords (`mesh.registry.agent_card`'s mapping,
the one the registry applies to a ``register.a2a`` message)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from mesh.errors import ConfigError
from mesh.registry.agent_card import AgentCard, registration_from_card

#: how long fetching a card may take
CARD_TIMEOUT_S = 10.0


def load_card(source: str) -> AgentCard:
    """The card at `source`: an ``http(s)://`` URL (GET) or a file.

    Raises:
        ConfigError: the card cannot be read, is not JSON, or is not an Agent Card.
    """
    try:
        if source.startswith(("http://", "https://")):
            response = httpx.get(source, timeout=CARD_TIMEOUT_S, follow_redirects=True)
            response.raise_for_status()
            raw: Any = response.json()
        else:
            raw = json.loads(Path(source).read_text(encoding="utf-8"))
        return AgentCard.model_validate(raw)
    except (OSError, httpx.HTTPError) as exc:
        raise ConfigError(f"cannot read the agent card {source}: {exc} (--card)") from None
    except json.JSONDecodeError as exc:
        raise ConfigError(f"the agent card {source} is not JSON: {exc} (--card)") from None
    except ValidationError as exc:
        raise ConfigError(f"{source} is not an A2A agent card: {exc} (--card)") from None


def card_fields(card: AgentCard, agent_id: str | None = None) -> dict[str, Any]:
    """`mesh.Agent` keyword arguments (agent_id, capability_text, examples, keywords, tags,
    supported_tasks, name, version) for the agent `card` describes."""
    reg = registration_from_card(card, instance_id="card", agent_id=agent_id)
    return {
        "agent_id": reg.agent_id,
        "capability_text": reg.capability_text,
        "examples": list(reg.examples),
        "keywords": list(reg.keywords),
        "tags": dict(reg.tags),
        "supported_tasks": list(reg.supported_tasks),
        "name": reg.name,
        "version": reg.version,
    }


__all__ = ["card_fields", "load_card"]
