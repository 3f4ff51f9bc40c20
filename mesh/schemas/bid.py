"""Call for bids: when no agent clears the threshold, candidates are asked how sure they are."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mesh.schemas._base import WireModel
from mesh.schemas.envelope import Identifier, TagMap


class BidRequest(WireModel):
    """Sent to candidate instances on `mesh.control`; answer with a `Bid` before `deadline_ms`."""

    task_id: Identifier
    capability: str = Field(min_length=1, max_length=4_000)
    required_tags: TagMap = Field(default_factory=dict)
    reply_to: Annotated[str, Field(min_length=1, max_length=255)]
    deadline_ms: int = Field(ge=0)


class Bid(WireModel):
    """An instance's answer to a call for bids."""

    task_id: Identifier
    agent_id: Identifier
    instance_id: Identifier
    confidence: float = Field(ge=0.0, le=1.0)
    load: float = Field(default=0.0, ge=0.0)
