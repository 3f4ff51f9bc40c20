"""`EventTail`: the demo's follower of the events exchange, as ``mesh events`` follows it.

Prints each routing decision as it happens (seconds since the demo began, the agent, the
strategy and score, the hop) and feeds every event into the observer's own per-agent
figures (`mesh.observer.figures.Figures`), which the summary prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue

from mesh.connection import MeshConnection
from mesh.messaging import login_of
from mesh.observer.figures import Figures
from mesh.schemas import Event, new_id
from mesh.wire import NoAck, Subscriber, each_event


def decision_line(event: Event, since_s: float) -> str:
    """``  3.210s  route  cs.orders  semantic 0.712  hop 0  <text>`` for a route.decision."""
    data = event.data or {}
    route = data.get("route") or {}
    score = route.get("score")
    how = f"{route.get('strategy', 'none'):<9}" + (
        f" {score:.3f}" if isinstance(score, int | float) else "      "
    )
    if route.get("low_confidence"):
        how += " low"
    text = " ".join(str(data.get("capability", "")).split())
    if len(text) > 48:
        text = text[:47] + "…"
    agent = event.agent_id or "(none)"
    return f"  {since_s:7.3f}s  route  {agent:<16} {how:<20} hop {data.get('hops', 0)}  {text}"


class EventTail:
    """``await tail.start()`` .. ``await tail.close()``; `figures` grows as events come."""

    def __init__(
        self,
        conn: MeshConnection,
        started: float,
        figures: Figures,
        show: Callable[[str], None] = print,
    ) -> None:
        self.conn = conn
        self.started = started
        self.figures = figures
        self.show = show
        self.events: list[Event] = []
        self.subscriber = Subscriber(
            conn, self._declare, each_event(self._on_event), NoAck("demo"), prefetch=256
        )

    async def _declare(self, channel: AbstractChannel) -> AbstractQueue:
        topology = self.conn.topology
        queue = await channel.declare_queue(
            topology.events_queue(login_of(self.conn.settings), f"demo-{new_id()[:8]}"),
            exclusive=True,
            auto_delete=True,
        )
        await queue.bind(topology.events, routing_key="#")
        return queue

    async def _on_event(self, event: Event, message: AbstractIncomingMessage) -> None:
        self.events.append(event)
        self.figures.observe(event)
        if event.type == "route.decision":
            self.show(decision_line(event, time.monotonic() - self.started))
        elif event.type.startswith("alert."):
            self.show(f"  {time.monotonic() - self.started:7.3f}s  {event.type}  {event.data}")

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.type == kind]

    async def start(self) -> None:
        await self.subscriber.start()

    async def close(self) -> None:
        await self.subscriber.close()


__all__ = ["EventTail", "decision_line"]
