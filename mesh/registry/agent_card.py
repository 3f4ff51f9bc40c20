"""A2A Agent Cards as registrations, so agents described for A2A join the mesh as they are.

An Agent Card (A2A specification, ``AgentCard``) names the agent (``name``, ``description``,
``version``) and lists its ``skills`` (``id``, ``name``, ``description``, ``tags``,
``examples``). The mapping onto `Registration`:

| card | registration |
| --- | --- |
| ``name`` | ``name``; ``agent_id`` too (slugged) unless one is given |
| ``version`` | ``version`` |
| ``description`` + each skill's ``name: description`` | ``capability_text`` (one line each) |
| skills' ``examples`` | ``examples`` |
| skills' ``tags`` | ``keywords``, and ``tags`` as ``{tag: "true"}`` plus ``{"protocol": "a2a"}`` |
| skills' ``id`` | ``supported_tasks`` |

The card models allow unknown fields: cards carry many (``url``, ``capabilities``,
``securitySchemes``...) that the mesh does not use and must not refuse.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mesh.schemas import Registration

#: Registration limits the mapping truncates to
_MAX_TEXT = 4_000
_MAX_ITEMS = 256
_MAX_TAG_KEY = 64


class AgentSkill(BaseModel):
    """One skill of an A2A Agent Card."""

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = Field(min_length=1)
    name: str = ""
    description: str = ""
    tags: list[str] = Field(default_factory=list)
    examples: list[str] = Field(default_factory=list)


class AgentCard(BaseModel):
    """The parts of an A2A Agent Card the mesh reads; the rest is kept, not checked."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1)
    description: str = ""
    version: str = "0"
    skills: list[AgentSkill] = Field(default_factory=list)


def slug(text: str) -> str:
    """An Identifier made from a display name: ``"Refund Desk"`` -> ``"refund-desk"``."""
    out = re.sub(r"[^A-Za-z0-9_.:@-]+", "-", text.strip().lower()).strip("-")
    return out[:128] or "agent"


def registration_from_card(
    card: AgentCard | dict[str, Any],
    *,
    instance_id: str,
    agent_id: str | None = None,
    max_concurrency: int = 4,
) -> Registration:
    """The `Registration` of one instance of the agent a card describes.

    Raises:
        pydantic.ValidationError: the card or the mapped registration is invalid.
    """
    c = card if isinstance(card, AgentCard) else AgentCard.model_validate(card)
    lines = [c.description.strip()] if c.description.strip() else []
    examples: list[str] = []
    keywords: list[str] = []
    for skill in c.skills:
        head = skill.name or skill.id
        lines.append(f"{head}: {skill.description}".strip().rstrip(":"))
        examples += [e for e in skill.examples if e.strip()]
        keywords += [t for t in skill.tags if t.strip()]
    keywords = list(dict.fromkeys(keywords))[:_MAX_ITEMS]
    tags = {t[:_MAX_TAG_KEY]: "true" for t in keywords}
    tags["protocol"] = "a2a"
    capability = "\n".join(line for line in lines if line) or c.name
    return Registration(
        agent_id=agent_id or slug(c.name),
        instance_id=instance_id,
        name=c.name[:256],
        version=c.version[:64],
        capability_text=capability[:_MAX_TEXT],
        supported_tasks=[s.id[:256] for s in c.skills][:_MAX_ITEMS],
        tags=tags,
        keywords=[k[:128] for k in keywords],
        examples=[e[:_MAX_TEXT] for e in examples][:_MAX_ITEMS],
        max_concurrency=max_concurrency,
    )
