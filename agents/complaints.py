"""Complaints: files a ticket and has the content agent write the apology.

The content agent is its downstream: when content keeps failing, the router's circuit
breaker for it opens and the handoff raises `mesh.DownstreamBusy` at once; complaints then
answers with its own short apology instead of waiting (seed 000 4.2).
"""

from __future__ import annotations

from typing import Any

from agents._contracts import ComplaintInput
from agents._data import find_order_id, is_chinese, pick, said, store
from mesh import Agent, DownstreamBusy, TaskContext
from mesh.schemas import TaskEnvelope, now_ms

agent = Agent(
    "cs.complaints",
    "投诉处理：受理客户对服务态度、发货慢、商品质量的投诉和不满，登记工单并道歉安抚。"
    "不处理：退款本身（售后）、物流查询（物流）。 "
    "Complaints: takes complaints about rude service, slow shipping or poor quality, files "
    "a ticket and apologises. Does not handle the refund itself (after-sales) or parcel "
    "tracking (logistics).",
    examples=[
        "客服态度太差了，我要投诉",
        "等了一个星期还没发货，太失望了",
        "我要投诉你们的快递员",
        "I want to file a complaint about your service",
        "this is unacceptable, nobody answers my emails",
        "your courier was rude to me",
    ],
    keywords=["投诉", "态度", "不满", "complaint", "complain", "unacceptable"],
    tags={"domain": "complaints"},
    input_model=ComplaintInput,
    name="投诉处理 / Complaints",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    ticket = await (await store()).file_ticket(
        {
            "text": text,
            "order_id": task.payload.get("order_id") or find_order_id(text),
            "task_id": ctx.task_id,
            "ts_ms": now_ms(),
        }
    )
    ticket_id = f"T-{ticket:04d}"
    out: dict[str, Any] = {"ticket": ticket_id, "handled_by": [ctx.agent_id]}
    try:
        written = await ctx.handoff(
            "write an apology reply to a complaint",
            {
                "template": "apology",
                "fields": {"ticket": ticket_id},
                "lang": "zh" if is_chinese(text) else "en",
            },
            target="cs.content",
        )
    except DownstreamBusy:
        # the breaker is open: answer now, in a plainer voice
        return {**out, "reply": _plain(text, ticket_id), "degraded": "downstream_busy"}
    if written.status != "completed" or written.output is None:
        return {**out, "reply": _plain(text, ticket_id), "degraded": "content_failed"}
    out["handled_by"].append(written.agent_id)
    return {**out, "reply": written.output["reply"], "degraded": None}


def _plain(text: str, ticket_id: str) -> str:
    return pick(
        text,
        f"抱歉，已为您登记投诉（工单 {ticket_id}）。",
        f"Sorry: your complaint is filed as {ticket_id}.",
    )
