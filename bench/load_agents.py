"""Agents and queries of the load benchmark, built from the bundled CLINC150 data.

``mesh worker bench.load_agents:agents`` (cwd = the repository root) hosts the slice of
agents named by ``LOAD_AGENTS`` ("START:STOP", default "0:150"). Agent k plays intent
k % 150; past the 150 intents it gets the id suffix ``.v<k // 150>`` and a rotated subset
of that intent's examples, so any number of distinct agents can be made. Handlers answer
``{"ok": True}`` at once, or after ``LOAD_HANDLER_MS`` milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

DATA = Path(__file__).resolve().parent / "data" / "clinc150"
#: examples an agent copy (k >= 150) keeps of its intent's examples
COPY_EXAMPLES = 4


@cache
def intents() -> list[dict[str, Any]]:
    """The 150 CLINC150 intents as agent cards (agent_id, capability_text, examples, tags)."""
    data: list[dict[str, Any]] = json.loads((DATA / "agents.json").read_text())
    return data


def parse_slice(text: str) -> tuple[int, int]:
    """ "START:STOP" -> (START, STOP); a bare number N means "0:N"."""
    start, sep, stop = text.partition(":")
    if not sep:
        return 0, int(start)
    return int(start or 0), int(stop)


def agent_id(k: int) -> str:
    base = str(intents()[k % len(intents())]["agent_id"])
    copy = k // len(intents())
    return base if copy == 0 else f"{base}.v{copy}"


def agent_ids(start: int, stop: int) -> list[str]:
    return [agent_id(k) for k in range(start, stop)]


def intent_ids(start: int, stop: int) -> list[str]:
    """The CLINC150 intents agents START..STOP play (a query's "expected" label)."""
    count = len(intents())
    return sorted({str(intents()[k % count]["agent_id"]) for k in range(start, stop)})


def _examples(card: dict[str, Any], copy: int) -> list[str]:
    examples = [str(e) for e in card.get("examples", [])]
    if copy == 0 or not examples:
        return examples
    shift = copy % len(examples)
    return (examples[shift:] + examples[:shift])[:COPY_EXAMPLES]


async def _handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    delay_ms = float(os.environ.get("LOAD_HANDLER_MS", "0") or 0)
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000.0)
    return {"ok": True}


def build_agent(k: int) -> Agent:
    card = intents()[k % len(intents())]
    agent = Agent(
        agent_id(k),
        str(card["capability_text"]),
        examples=_examples(card, k // len(intents())),
        tags={str(a): str(b) for a, b in card.get("tags", {}).items()},
    )
    agent.handler(_handle)
    return agent


def build_agents(start: int, stop: int) -> list[Agent]:
    return [build_agent(k) for k in range(start, stop)]


def queries(intent_ids: Iterable[str] | None = None) -> Iterator[str]:
    """Unique query texts of the validation set (only those labelled with one of
    `intent_ids`, when given), then again with " #<n>" appended."""
    wanted = set(intent_ids) if intent_ids is not None else None
    rows = [
        json.loads(line) for line in (DATA / "val.jsonl").read_text().splitlines() if line.strip()
    ]
    texts = [str(r["text"]) for r in rows if wanted is None or r.get("expected") in wanted]
    unique = list(dict.fromkeys(texts)) or list(dict.fromkeys(str(r["text"]) for r in rows))
    yield from unique
    n = 0
    while True:
        for text in unique:
            n += 1
            yield f"{text} #{n}"


agents: list[Agent] = build_agents(*parse_slice(os.environ.get("LOAD_AGENTS", "0:150")))
