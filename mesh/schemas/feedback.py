"""Feedback on a routed task, sent by its caller to the routers (under access control)."""

from __future__ import annotations

from pydantic import Field

from mesh.schemas._base import WireModel
from mesh.schemas.envelope import Identifier


class Feedback(WireModel):
    """A caller's verdict on one of its own routed tasks, published to ``<ns>.feedback``.

    Only the user that submitted the task (its broker-validated ``user_id``) is believed;
    the router applies it to the example memory of the agent the task was routed to.
    """

    task_id: Identifier = Field(description="the routed task (from its Result)")
    good: bool = Field(description="true: learn from it; false: count against the agent")
