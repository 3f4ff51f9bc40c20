"""A2A Agent Cards map onto registrations (pure logic)."""

from __future__ import annotations

import pydantic
import pytest

from mesh.registry.agent_card import AgentCard, registration_from_card, slug

CARD = {
    "name": "Refund Desk",
    "description": "Handles refunds for orders.",
    "version": "2.1",
    "url": "https://refunds.example/a2a",
    "capabilities": {"streaming": False},
    "securitySchemes": {},
    "skills": [
        {
            "id": "refund",
            "name": "Refund an order",
            "description": "Refunds a paid order given its order id",
            "tags": ["refund", "payments"],
            "examples": ["refund order 42", "I want my money back"],
            "inputModes": ["text/plain"],
        },
        {"id": "status", "name": "Refund status", "tags": ["refund"], "examples": []},
    ],
}


def test_card_maps_onto_registration() -> None:
    reg = registration_from_card(CARD, instance_id="desk-1", max_concurrency=3)
    assert reg.agent_id == "refund-desk"
    assert reg.instance_id == "desk-1"
    assert reg.name == "Refund Desk" and reg.version == "2.1"
    assert reg.capability_text.splitlines() == [
        "Handles refunds for orders.",
        "Refund an order: Refunds a paid order given its order id",
        "Refund status",
    ]
    assert reg.examples == ["refund order 42", "I want my money back"]
    assert reg.keywords == ["refund", "payments"]
    assert reg.tags == {"refund": "true", "payments": "true", "protocol": "a2a"}
    assert reg.supported_tasks == ["refund", "status"]
    assert reg.max_concurrency == 3


def test_explicit_agent_id_wins_and_unknown_fields_are_kept() -> None:
    reg = registration_from_card(AgentCard.model_validate(CARD), instance_id="i", agent_id="rd")
    assert reg.agent_id == "rd"
    assert AgentCard.model_validate(CARD).model_extra == {
        "url": "https://refunds.example/a2a",
        "capabilities": {"streaming": False},
        "securitySchemes": {},
    }


def test_card_without_name_is_refused() -> None:
    with pytest.raises(pydantic.ValidationError):
        registration_from_card({"description": "nameless"}, instance_id="i")


@pytest.mark.parametrize(
    ("name", "expected"),
    [("Refund Desk", "refund-desk"), ("  Ünïcode / Agent ", "n-code-agent"), ("!!!", "agent")],
)
def test_slug(name: str, expected: str) -> None:
    assert slug(name) == expected
