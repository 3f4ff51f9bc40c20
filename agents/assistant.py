"""Assistant: the one agent that may call a language model (an OpenAI-compatible API).

Configured by environment when the handler runs (nothing is read at import):
``MESH_DEMO_LLM_URL`` (the API's base URL, e.g. ``http://127.0.0.1:11434/v1``),
``MESH_DEMO_LLM_MODEL`` and ``MESH_DEMO_LLM_KEY`` (optional). Without a URL it answers
plainly that no model is configured: the demo and the tests never touch the network.
The request times out at the task's deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents._contracts import QuestionInput
from agents._data import pick, said
from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

#: the model asked when MESH_DEMO_LLM_MODEL is not set
DEFAULT_MODEL = "gpt-4o-mini"
SYSTEM_PROMPT = (
    "You are a customer-service assistant of an online shop. Answer briefly, in the "
    "customer's language."
)


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """``MESH_DEMO_LLM_*``: where the model is (no URL: none configured)."""

    url: str = ""
    model: str = DEFAULT_MODEL
    key: str = field(default="", repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> LLMSettings:
        return cls(
            url=env.get("MESH_DEMO_LLM_URL", ""),
            model=env.get("MESH_DEMO_LLM_MODEL") or DEFAULT_MODEL,
            key=env.get("MESH_DEMO_LLM_KEY", ""),
        )


agent = Agent(
    "cs.assistant",
    "AI 助手：用大语言模型总结和润色较长的客户对话、回答开放式问题（需配置模型）。 "
    "AI assistant: summarises and polishes long customer conversations and answers open "
    "questions with a language model (when one is configured).",
    examples=[
        "用一句话总结这段客户对话",
        "summarise this conversation with the customer in one sentence",
    ],
    keywords=["总结", "summarise", "summarize"],
    tags={"domain": "assistant"},
    input_model=QuestionInput,
    name="AI 助手 / Assistant",
)


def chat(config: LLMSettings, text: str, timeout_s: float) -> str:
    """One chat completion (blocking; run it in a thread)."""
    body = json.dumps(
        {
            "model": config.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": text},
            ],
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if config.key:
        headers["Authorization"] = f"Bearer {config.key}"
    request = urllib.request.Request(
        config.url.rstrip("/") + "/chat/completions", data=body, headers=headers
    )
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        data = json.loads(response.read())
    return str(data["choices"][0]["message"]["content"])


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    config = LLMSettings.from_env()
    if not config.url:
        return {
            "reply": pick(
                text,
                "未配置语言模型（设置 MESH_DEMO_LLM_URL、MESH_DEMO_LLM_MODEL、"
                "MESH_DEMO_LLM_KEY 后可用）。",
                "No language model is configured (set MESH_DEMO_LLM_URL, MESH_DEMO_LLM_MODEL "
                "and MESH_DEMO_LLM_KEY to use one).",
            ),
            "llm": None,
            "handled_by": [ctx.agent_id],
        }
    timeout_s = max(1.0, ctx.time_left_ms() / 1000.0 - 0.5)
    reply = await asyncio.to_thread(chat, config, text, timeout_s)
    return {"reply": reply, "llm": config.model, "handled_by": [ctx.agent_id]}
