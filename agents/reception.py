"""Reception: greets the customer and hands a request with an order number on to orders.

The front desk of seed 000 section 1.1: it does not look orders up or refund anything
itself; a compound request ("my order A-1001 ... can I return it?") goes to orders, which
hands the return on to after-sales, all on one trace (``mesh trace``).
"""

from __future__ import annotations

from typing import Any

from agents._contracts import ReceptionInput
from agents._data import find_order_id, pick, said
from mesh import Agent, DownstreamBusy, TaskContext
from mesh.schemas import TaskEnvelope

agent = Agent(
    "cs.reception",
    "前台接待：问候客户，了解来意，把带订单号的问题（查单、退货等复合请求）转交给订单和售后。"
    "不处理：退款、物流查询、投诉、产品问题本身。 "
    "Reception: greets customers, finds out what they need and passes a request that names "
    "an order on to the orders and after-sales agents. Does not handle refunds, parcel "
    "tracking, complaints or product questions itself.",
    examples=[
        "你好",
        "在吗？我有个问题想咨询",
        "你好，我的订单 A-1001 想退货",
        "hello, is anyone there?",
        "hi, I need help with my order A-1003",
        "good morning",
    ],
    keywords=["你好", "在吗", "hello", "hi"],
    tags={"domain": "reception"},
    input_model=ReceptionInput,
    name="前台接待 / Reception",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    hello = pick(text, "您好，欢迎光临！", "Hello and welcome!")
    order_id = task.payload.get("order_id") or find_order_id(text)
    if order_id is None:
        menu = pick(
            text,
            "请问有什么可以帮您？查订单、退换货、物流、发票都可以问我。",
            "How can I help? Orders, returns, parcels and invoices are all fine to ask about.",
        )
        return {"reply": f"{hello}{menu}", "handled_by": [ctx.agent_id]}
    try:
        result = await ctx.handoff(
            f"look up order {order_id} and handle: {text}",
            {"order_id": order_id, "text": text},
            target="cs.orders",
        )
    except DownstreamBusy:
        return {
            "reply": hello
            + pick(text, "订单系统正忙，请稍后再试。", "Orders are busy, try later."),
            "degraded": "downstream_busy",
            "handled_by": [ctx.agent_id],
        }
    inner = result.output or {}
    return {
        "reply": f"{hello}{inner.get('reply', '')}",
        "order_id": order_id,
        "status": result.status,
        "handled_by": [ctx.agent_id, *inner.get("handled_by", [result.agent_id])],
        **({"error": result.error.code} if result.error else {}),
    }
