"""Fallback: whatever no specialist covers (seed 002 7.1), with a human hand-off.

The routers send it what scores below the low-confidence threshold for everyone
(``MESH_FALLBACK_AGENT=cs.fallback``, as `mesh demo` runs them). It never claims to know.
"""

from __future__ import annotations

from typing import Any

from agents._contracts import QuestionInput
from agents._data import pick, said
from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

agent = Agent(
    "cs.fallback",
    "通用兜底：专职 Agent 都不覆盖的问题，礼貌说明并转人工。 "
    "General fallback: anything the specialised agents do not cover; says so politely and "
    "offers a human colleague.",
    tags={"domain": "general"},
    input_model=QuestionInput,
    name="兜底 / Fallback",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    return {
        "reply": pick(
            text,
            "这个问题超出了我们客服团队的范围，已为您转接人工客服。",
            "That is outside what our service team covers; a human colleague will follow up.",
        ),
        "handoff": "human",
        "handled_by": [ctx.agent_id],
    }
