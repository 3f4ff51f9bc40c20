"""Agents in other forms, run as ordinary mesh workers: an HTTP endpoint (`HttpBridge`),
optionally described by an A2A Agent Card (`load_card`, `card_fields`) or a registration
file (`load_registration`, `registration_document`: a Python agent's texts, tags and contract).

``mesh bridge http AGENT_ID --url URL`` runs one (`mesh.cli.bridge`); from Python,
`http_agent` builds the `Agent` and its bridge.
"""

from __future__ import annotations

from typing import Any

from mesh.bridge.card import card_fields, load_card
from mesh.bridge.http import HttpBridge, request_body
from mesh.bridge.registration import load_registration, registration_document
from mesh.worker.agent import Agent


def http_agent(
    agent_id: str,
    capability_text: str,
    url: str,
    *,
    headers: dict[str, str] | None = None,
    sample_ratio: float = 0.1,
    **fields: Any,
) -> tuple[Agent, HttpBridge]:
    """An `Agent` whose handler POSTs each task to `url`, and that handler (close it with
    `HttpBridge.aclose` when the worker stopped). `fields`: any other `Agent` field."""
    bridge = HttpBridge(url, headers=headers, sample_ratio=sample_ratio)
    agent = Agent(agent_id, capability_text, **fields)
    agent.handler(bridge)
    return agent, bridge


__all__ = [
    "HttpBridge",
    "card_fields",
    "http_agent",
    "load_card",
    "load_registration",
    "registration_document",
    "request_body",
]
