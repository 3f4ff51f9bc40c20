"""After-sales: returns and refunds, the team's one real side effect.

A refund is paid once per order however often its task runs: ``ctx.apply_once`` adds to
the order's refund counter (``<ns>:effect:refund:<order>``) atomically with the fencing
check, so a rerun after a crash (the instance SIGKILLed while the bank confirms) finds it
applied and only finishes the paperwork, and an instance whose lease lapsed (a stale
fencing token) cannot pay at all. Run two instances: the demo kills one mid-refund.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents._contracts import AfterSalesInput
from agents._data import find_order_id, pick, refund_effect, said, store
from mesh import Agent, DownstreamBusy, TaskContext
from mesh.schemas import TaskEnvelope, now_ms

#: days after delivery a return is accepted (the knowledge base says the same)
RETURN_WINDOW_DAYS = 30

agent = Agent(
    "cs.after_sales",
    "售后专员：处理退货、退款、换货申请，查询退款进度，需要订单号；签收 30 天内可退。"
    "不处理：物流轨迹、订单地址修改、产品咨询、投诉。 "
    "After-sales: handles returns, refunds and exchanges and tells refund status; needs an "
    "order id; returns are accepted within 30 days of delivery. Does not handle parcel "
    "tracking, address changes, product questions or complaints.",
    examples=[
        "我上个月买的手机能退吗",
        "退款什么时候到账",
        "鞋子尺码不合适，我要退货",
        "I want to return the headphones I bought",
        "can I get my money back for order A-1003",
        "how is my refund going",
    ],
    keywords=["退款", "退货", "换货", "refund", "return", "exchange"],
    tags={"domain": "after_sales"},
    input_model=AfterSalesInput,
    name="售后专员 / After-sales",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    order_id = task.payload.get("order_id") or find_order_id(text)
    shared = (await ctx.context()).get("order")  # the orders agent's lookup, if it did one
    shop = await store()
    order = shared or (await shop.order(order_id) if order_id else None)
    if order is None:
        return {
            "reply": pick(text, "请提供要退货的订单号。", "Which order would you like to return?"),
            "handled_by": [ctx.agent_id],
        }
    order_id = order["order_id"]
    if order.get("dispute") == "price":
        # the misconfiguration of seed 000 4.4: each side thinks the other owns it
        return await _back_to_orders(text, order_id, ctx)
    if order["status"] != "delivered":
        return {
            "reply": pick(
                text,
                f"订单 {order_id} 还没有签收，可以直接取消订单。",
                f"Order {order_id} has not been delivered yet: it can simply be cancelled.",
            ),
            "refunded": False,
            "handled_by": [ctx.agent_id],
        }
    if order.get("delivered_days_ago", 0) > RETURN_WINDOW_DAYS:
        return {
            "reply": pick(
                text,
                f"订单 {order_id} 已签收超过 {RETURN_WINDOW_DAYS} 天，不能退货，但仍在保修期内。",
                f"Order {order_id} was delivered over {RETURN_WINDOW_DAYS} days ago: no return, "
                "but the warranty still applies.",
            ),
            "refunded": False,
            "handled_by": [ctx.agent_id],
        }
    return await _refund(text, order, ctx)


async def _refund(text: str, order: dict[str, Any], ctx: TaskContext) -> dict[str, Any]:
    order_id = order["order_id"]
    shop = await store()
    earlier = await shop.refund(order_id)
    if earlier is not None and earlier.get("status") == "refunded":
        return {
            "reply": pick(text, f"订单 {order_id} 已经退款。", f"Order {order_id} is refunded."),
            "refund_id": earlier["refund_id"],
            "refunded": True,
            "applied_now": False,
            "handled_by": [ctx.agent_id],
        }
    # the money: once per order, fenced; False when an earlier run of this task paid it
    applied = await ctx.apply_once(refund_effect(order_id))
    record = {
        "refund_id": f"RF-{order_id}",
        "amount": order["amount"],
        "status": "pending",
        "task_id": ctx.task_id,
        "instance_id": ctx.instance_id,
        "paid_by_this_run": applied,
        "ts_ms": now_ms(),
    }
    await shop.put_refund(order_id, record)
    # the bank confirms; a slow gateway (A-1007's) is where the demo kills an instance
    await asyncio.sleep(order.get("gateway_ms", 0) / 1000.0)
    await ctx.fence()
    await shop.put_refund(order_id, {**record, "status": "refunded", "ts_ms": now_ms()})
    amount = f"{order['amount']:.0f}"
    return {
        "reply": pick(
            text,
            f"订单 {order_id} 已退款 {amount} 元（退款单 RF-{order_id}），1-3 个工作日原路退回。",
            f"Order {order_id}: {amount} yuan refunded (RF-{order_id}), back on the original "
            "payment in 1-3 working days.",
        ),
        "refund_id": f"RF-{order_id}",
        "refunded": True,
        "applied_now": applied,
        "handled_by": [ctx.agent_id],
    }


async def _back_to_orders(text: str, order_id: str, ctx: TaskContext) -> dict[str, Any]:
    try:
        result = await ctx.handoff(
            f"price adjustment of order {order_id}: {text}",
            {"order_id": order_id, "text": text},
            target="cs.orders",
        )
    except DownstreamBusy:
        return {"reply": "", "error": "downstream_busy", "handled_by": [ctx.agent_id]}
    inner = result.output or {}
    code = result.error.code if result.error else inner.get("error")
    return {
        "reply": inner.get("reply", ""),
        "handled_by": [ctx.agent_id, *inner.get("handled_by", [result.agent_id])],
        **({"error": code} if code else {}),
    }
