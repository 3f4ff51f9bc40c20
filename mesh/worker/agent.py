"""`Agent`: what an agent is (its identity, capability and handler), not how it runs."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from mesh.errors import ConfigError
from mesh.payload_schema import schema_of
from mesh.schemas import BidRequest, Registration, TaskEnvelope

if TYPE_CHECKING:
    from mesh.worker.context import TaskContext

Handler = Callable[[TaskEnvelope, "TaskContext"], Awaitable[dict[str, Any]]]
#: answers a call for bids: a confidence in [0, 1], or None to stay out
Bidder = Callable[[BidRequest], Awaitable[float | None]]


@dataclass(slots=True)
class Agent:
    """An agent definition: ``agent = Agent("refund", "Refunds orders")`` then ``@agent.handler``.

    Run it with ``mesh worker module:agent`` or `WorkerRuntime`.
    """

    agent_id: str
    capability_text: str
    handler_fn: Handler | None = None
    bidder_fn: Bidder | None = None
    examples: list[str] = field(default_factory=list)
    tags: dict[str, str] = field(default_factory=dict)
    keywords: list[str] = field(default_factory=list)
    supported_tasks: list[str] = field(default_factory=list)
    max_concurrency: int = 4
    priority_bonus: float = 0.0
    name: str = ""
    version: str = "0"
    #: a handler that shows no progress (`TaskContext.progress`) this long is frozen: it is
    #: cancelled and its task handed back to the agent's queue for another instance
    #: (None: ``MESH_PROCESSING_TIMEOUT_S``)
    processing_timeout_s: float | None = None
    #: the agent's contract (`mesh.payload_schema`): what a task's payload and the
    #: handler's output must fit, as pydantic models or JSON Schemas (one of each pair)
    input_model: type[BaseModel] | None = None
    output_model: type[BaseModel] | None = None
    input_schema: dict[str, Any] | None = None
    output_schema: dict[str, Any] | None = None
    #: a failed handler's exception text reaches the caller as it is (default: its type and
    #: a message stripped of URLs, credentials and tokens; the full text stays in the log)
    expose_errors: bool = False

    def handler(self, fn: Handler) -> Handler:
        """Decorator: ``@agent.handler async def handle(task, ctx) -> dict``."""
        self.handler_fn = fn
        return fn

    def bidder(self, fn: Bidder) -> Bidder:
        """Decorator: ``@agent.bidder async def bid(request) -> float | None``.

        Called when the router finds no agent above its threshold and asks the closest
        candidates how sure they are (a call for bids); the most confident one gets the task.
        Agents without a bidder never bid.
        """
        self.bidder_fn = fn
        return fn

    def require_handler(self) -> Handler:
        if self.handler_fn is None:
            raise ConfigError(
                f"agent {self.agent_id!r} has no handler: decorate one with @agent.handler"
            )
        return self.handler_fn

    def registration(self, instance_id: str) -> Registration:
        """The registration this agent sends for one of its instances (validated)."""
        return Registration(
            agent_id=self.agent_id,
            instance_id=instance_id,
            name=self.name or self.agent_id,
            version=self.version,
            capability_text=self.capability_text,
            supported_tasks=self.supported_tasks,
            tags=self.tags,
            keywords=self.keywords,
            examples=self.examples,
            max_concurrency=self.max_concurrency,
            priority_bonus=self.priority_bonus,
            bids=self.bidder_fn is not None,
            input_schema=schema_of(self.input_model, self.input_schema),
            output_schema=schema_of(self.output_model, self.output_schema),
        )
