"""Log analysis: finds error codes in a log line or question and explains them (seed 003).

It knows the mesh's own error codes (``downstream_busy``, ``max_hops_exceeded``...) and
the shop's systems' (``PAY-4021``...), from the table in Redis (`agents._data.ERROR_CODES`).
"""

from __future__ import annotations

import re
from typing import Any

from agents._contracts import LogInput
from agents._data import is_chinese, pick, said, store
from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

#: what looks like an error code: PAY-4021, or a snake_case mesh code
_CODE = re.compile(r"\b[A-Z]{2,5}-\d{3,4}\b|\b[a-z]+(?:_[a-z]+)+\b")

agent = Agent(
    "cs.log_analysis",
    "日志分析：定位日志和报错信息里的错误码，解释含义并给出排查建议，也解释网格自身的错误码。"
    "不处理：客户的订单、退款、物流问题。 "
    "Log analysis: finds the error codes in a log line or error message, explains what "
    "each means and how to fix it, the mesh's own codes included. Does not handle "
    "customers' orders, refunds or parcels.",
    examples=[
        "帮我看看这个报错码是啥：PAY-4021",
        "日志里出现 WMS-503 是什么意思",
        "downstream_busy 这个错误怎么处理",
        "what does error code SF-1102 mean",
        "explain this log line: ERROR task failed max_hops_exceeded",
        "why do I get bad_payload",
    ],
    keywords=["报错", "错误码", "日志", "error code", "log", "stack trace", "exception"],
    tags={"domain": "ops"},
    input_model=LogInput,
    name="日志分析 / Log analysis",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    log = task.payload.get("log") or text
    table = await (await store()).table("errors")
    codes = [c for c in dict.fromkeys(_CODE.findall(log)) if c in table]
    if not codes:
        return {
            "reply": pick(text, "没有找到已知的错误码。", "No known error code found."),
            "codes": [],
            "handled_by": [ctx.agent_id],
        }
    lang = "zh" if is_chinese(text) else "en"
    lines = [f"{code}: {table[code][lang]} ({table[code]['fix']})" for code in codes]
    return {"reply": "\n".join(lines), "codes": codes, "handled_by": [ctx.agent_id]}
