"""What a demo scenario gets to work with (`DemoRun`) and how it says what it expects.

A scenario (``agents/demo_script.py``) sends requests with `DemoRun.ask`, each with an
`Expect`ation of the kind of answer it should get; a story that checks a fact of its own
(a counter in Redis, a dead letter) records it with `DemoRun.check`. The demo exits 0
only when every expectation held.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from mesh.demo.fleet import Fleet
from mesh.demo.tail import EventTail
from mesh.errors import MeshError
from mesh.schemas import Result, TaskEnvelope
from mesh.tasks import raise_if_cancelling


@dataclass(frozen=True, slots=True)
class Expect:
    """The kind of answer a request should get: its status, who answered, and optionally
    the error code, the routing strategy and a check of the output."""

    agents: tuple[str, ...] = ()
    status: str = "completed"
    error: str | None = None
    strategy: str | None = None
    output: Callable[[dict[str, Any]], bool] | None = None
    #: what `output` checks, said in words (printed when it fails)
    means: str = ""

    def misses(self, result: Result) -> list[str]:
        """What of this expectation `result` does not meet (empty: all of it)."""
        wrong = []
        if result.status != self.status:
            wrong.append(f"status {result.status} (expected {self.status})")
        if self.agents and result.agent_id not in self.agents:
            wrong.append(f"answered by {result.agent_id} (expected {' or '.join(self.agents)})")
        code = result.error.code if result.error else None
        if self.error is not None and code != self.error:
            wrong.append(f"error {code} (expected {self.error})")
        strategy = result.route.strategy if result.route else None
        if self.strategy is not None and strategy != self.strategy:
            wrong.append(f"strategy {strategy} (expected {self.strategy})")
        if self.output is not None and not (
            result.output is not None and self.output(result.output)
        ):
            wrong.append(f"output {result.output} ({self.means or 'did not pass its check'})")
        return wrong


@dataclass(slots=True)
class Outcome:
    """One request (or story check) of the run, and whether it went as expected."""

    label: str
    story: str
    ok: bool
    detail: str
    agent_id: str | None = None
    status: str | None = None
    took_ms: float | None = None
    task_id: str | None = None
    trace_id: str | None = None


def _said(result: Result) -> str:
    """What a Result says in one line: its reply, else its error code, else its output."""
    output = result.output or {}
    reply = output.get("reply")
    if isinstance(reply, str):
        return reply
    if result.error is not None:
        return result.error.code
    return ", ".join(f"{k}={v}" for k, v in output.items() if not isinstance(v, dict | list))


@dataclass(slots=True)
class DemoRun:
    """The running mesh as a scenario sees it."""

    conn: MeshConnection
    client: MeshClient
    fleet: Fleet
    tail: EventTail
    quick: bool
    started: float
    outcomes: list[Outcome] = field(default_factory=list)
    #: members of the team that could not run (agent id -> why), the scenario adapts
    skipped: dict[str, str] = field(default_factory=dict)
    #: facts a scenario reports for the summary (refund counts, trace ids...)
    facts: dict[str, Any] = field(default_factory=dict)
    show: Callable[[str], None] = print

    def since(self) -> float:
        return time.monotonic() - self.started

    def section(self, title: str) -> None:
        self.show(f"\n== {title}")

    async def ask(
        self,
        story: str,
        text: str,
        expect: Expect,
        payload: dict[str, Any] | None = None,
        *,
        wait_s: float | None = None,
        **fields: Any,
    ) -> Result | None:
        """Send `text` (with `payload` and envelope `fields`), wait for its Result, print
        it and record whether it met `expect`. None when no Result came (recorded too)."""
        envelope = TaskEnvelope(capability=text, payload=payload or {}, **fields)
        return await self.send(story, envelope, expect, wait_s=wait_s)

    async def send(
        self, story: str, envelope: TaskEnvelope, expect: Expect, *, wait_s: float | None = None
    ) -> Result | None:
        raise_if_cancelling()  # a Ctrl-C a library swallowed stops the demo at the next ask
        began = time.monotonic()
        label = " ".join(envelope.capability.split())[:60]
        self.show(f"  {self.since():7.3f}s  ask    {label}")
        try:
            result = await self.client.send(envelope, wait_s=wait_s)
        except MeshError as exc:
            self.record(Outcome(label, story, False, f"no result: {exc}", task_id=envelope.task_id))
            return None
        took = (time.monotonic() - began) * 1000.0
        misses = expect.misses(result)
        said = _said(result)
        self.record(
            Outcome(
                label,
                story,
                not misses,
                "; ".join(misses) or " ".join(str(said).split())[:90],
                agent_id=result.agent_id,
                status=result.status,
                took_ms=took,
                task_id=result.task_id,
                trace_id=result.trace_id,
            )
        )
        return result

    def check(self, story: str, label: str, ok: bool, detail: str) -> None:
        """Record a story's own fact (a counter, a dead letter) as an outcome."""
        self.record(Outcome(label, story, ok, detail))

    def record(self, outcome: Outcome) -> None:
        self.outcomes.append(outcome)
        mark = "ok " if outcome.ok else "NOT"
        who = f"{outcome.agent_id} {outcome.status}" if outcome.status else "check"
        took = f" {outcome.took_ms:.0f}ms" if outcome.took_ms is not None else ""
        self.show(f"  {self.since():7.3f}s  {mark}    [{who}{took}] {outcome.detail}")


__all__ = ["DemoRun", "Expect", "Outcome"]
