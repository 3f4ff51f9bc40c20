"""A customer-service team (the seeds' running example), as mesh agents.

Each handler is deterministic (no model call) so the demo and tests are repeatable; a real
deployment replaces the body with an LLM or tool call and keeps the contract.
Run one with ``mesh worker agents.support:refunds``.
"""

from __future__ import annotations

from typing import Any

from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

refunds = Agent(
    "support.refunds",
    "Handles returns, refunds and exchanges of purchased products: refund requests, return "
    "labels, refund status. Needs an order id. Does not track parcels or answer product "
    "questions.",
    examples=[
        "I want to return the phone I bought last month",
        "can I get my money back for this order",
        "我上个月买的手机能退吗",
        "退款什么时候到账",
    ],
    keywords=["refund", "return", "退款", "退货"],
    tags={"domain": "after_sales"},
)

logistics = Agent(
    "support.logistics",
    "Tracks parcels and deliveries: shipping status, delivery dates, couriers, lost or "
    "delayed packages. Does not handle refunds.",
    examples=[
        "where is my package",
        "my order has not arrived yet",
        "我的快递到哪了",
        "物流信息三天没更新了",
    ],
    keywords=["delivery", "parcel", "快递", "物流"],
    tags={"domain": "logistics"},
)

presales = Agent(
    "support.presales",
    "Answers questions before a purchase: product features, prices, stock, compatibility, "
    "invoices for companies.",
    examples=[
        "does this laptop support two monitors",
        "is the blue one in stock",
        "这款耳机有降噪吗",
        "能开公司发票吗",
    ],
    tags={"domain": "sales"},
)

helpdesk = Agent(
    "support.fallback",
    "General help desk: answers anything the specialised agents do not cover, with low "
    "confidence, and offers a human hand-off.",
    tags={"domain": "general"},
)


@refunds.handler
async def handle_refund(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    order = str(task.payload.get("order_id", "unknown"))
    return {"reply": f"Refund opened for order {order}", "refund_id": f"RF-{order}"}


@logistics.handler
async def handle_logistics(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    order = str(task.payload.get("order_id", "unknown"))
    return {"reply": f"Order {order} is out for delivery", "eta_days": 1}


@presales.handler
async def handle_presales(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    return {"reply": "Yes: it is in stock and supports that feature."}


@helpdesk.handler
async def handle_general(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    return {"reply": "I am not sure; a colleague will follow up.", "handoff": "human"}


TEAM: tuple[Agent, ...] = (refunds, logistics, presales, helpdesk)
