"""The Result a caller gets back for every accepted task, whatever happened."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from mesh.schemas._base import WireModel

Status = Literal[
    "completed", "failed", "rejected", "expired", "unroutable", "dead", "queued_for_human"
]
#: statuses that end a task; every accepted task gets exactly one of them.
#: ``queued_for_human`` is not one: it is the interim Result of a task no agent scored above
#: the threshold for while no fallback agent is configured (degradation level 2). The task
#: waits in the ``<ns>.human`` queue for a person (`mesh human answer`); their answer, a
#: terminal Result, follows on the same reply queue if it still exists and is stored with
#: the task either way (`mesh task TASK_ID`).
TERMINAL_STATUSES: frozenset[str] = frozenset(
    {"completed", "failed", "rejected", "expired", "unroutable", "dead"}
)


class FieldProblem(WireModel):
    """One bad field of an invalid message: where it is and what is wrong."""

    loc: str
    msg: str


class ErrorInfo(WireModel):
    """Why a task did not complete. `code` is stable and machine-readable."""

    code: str = Field(min_length=1, max_length=64)
    message: str = Field(max_length=8_192)
    details: dict[str, Any] = Field(default_factory=dict)


#: ``local_rule``: no router ran; a rule of the client sent the task (`mesh.local_rules`);
#: ``human``: a person answered it from the human queue (`mesh human answer`)
Strategy = Literal[
    "target", "semantic", "arbitration", "bid", "fallback", "exploration", "local_rule", "human"
]


class RouteInfo(WireModel):
    """How the router chose the agent."""

    strategy: Strategy
    score: float | None = None
    low_confidence: bool = False
    #: the tag of the router that dispatched the task: a worker publishes the task's outcome
    #: event with it as the routing key's last word, so only that router learns from it
    #: (the others get its counts in batches, ``route.counts``)
    router: str | None = Field(default=None, max_length=64, pattern=r"^[A-Za-z0-9-]+$")
    #: the agent had no live instance when it was chosen, but had one recently
    #: (``MESH_AGENT_RETURN_WINDOW_S``): the task waited in its queue for an instance
    waiting_for_instance: bool = False


class Result(WireModel):
    """The outcome of a task, published to the envelope's `reply_to`.

    Every status but ``queued_for_human`` is terminal: exactly one of them per task. A
    ``queued_for_human`` Result is interim (the task was handed to a person: its `error`
    says why no agent took it, `route.score` is the best score); the person's answer comes
    later as a second, terminal Result with ``route.strategy="human"``.
    """

    task_id: str = Field(min_length=1, max_length=128)
    trace_id: str | None = Field(default=None, max_length=128)
    status: Status
    output: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    agent_id: str | None = None
    instance_id: str | None = None
    route: RouteInfo | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    hops: int = Field(default=0, ge=0)
