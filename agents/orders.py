"""Orders: looks orders up and changes them (the address, before shipping).

A return or refund request about an order is handed on to after-sales with the order's
facts in the trace's shared context (``ctx.save_context``: by reference, seed 000 4.3).
"""

from __future__ import annotations

from typing import Any

from agents._contracts import OrdersInput
from agents._data import find_order_id, pick, said, store
from mesh import Agent, DownstreamBusy, TaskContext
from mesh.schemas import TaskEnvelope

#: words that make an order question a return (after-sales' job)
RETURN_WORDS = ("退", "refund", "return", "send back", "money back")

agent = Agent(
    "cs.orders",
    "订单助手：查询订单状态、金额和收货地址，在发货前修改收货地址，需要订单号。"
    "不处理：退款、退货、换货、价格争议（交给售后），物流轨迹（交给物流）。 "
    "Orders: looks up an order's status, amount and delivery address and changes the "
    "address before it ships; needs an order id. Does not handle refunds, returns, "
    "exchanges or price disputes (after-sales) or parcel tracking (logistics).",
    examples=[
        "查一下我的订单 A-1002 现在什么状态",
        "订单 A-1004 的收货地址能改吗",
        "我的订单金额是多少",
        "what is the status of order A-1003",
        "please change the delivery address of order A-1004",
        "how much did I pay for my order",
    ],
    keywords=["订单", "改地址", "收货地址", "order status", "delivery address"],
    tags={"domain": "orders"},
    input_model=OrdersInput,
    name="订单助手 / Orders",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    order_id = task.payload.get("order_id") or find_order_id(text)
    if order_id is None:
        return {
            "reply": pick(text, "请提供订单号（例如 A-1001）。", "Which order? (e.g. A-1001)"),
            "handled_by": [ctx.agent_id],
        }
    shop = await store()
    order = await shop.order(order_id)
    if order is None:
        return {
            "reply": pick(text, f"没有找到订单 {order_id}。", f"No order {order_id} found."),
            "handled_by": [ctx.agent_id],
        }
    item = pick(text, order["item_zh"], order["item_en"])
    change = task.payload.get("change")
    if change is not None:
        return await _change_address(text, order, change["address"], ctx)
    if order.get("dispute") or any(w in text.lower() for w in RETURN_WORDS):
        # not ours: the order's facts go along by reference, the request to after-sales
        await ctx.save_context({"order": order})
        return await _to_after_sales(text, order_id, ctx)
    status = pick(text, _STATUS_ZH[order["status"]], order["status"].replace("_", " "))
    return {
        "reply": pick(
            text,
            f"订单 {order_id}（{item}，{order['amount']:.0f} 元）当前状态：{status}。",
            f"Order {order_id} ({item}, {order['amount']:.0f} yuan) is {status}.",
        ),
        "order": {"order_id": order_id, "status": order["status"], "amount": order["amount"]},
        "handled_by": [ctx.agent_id],
    }


_STATUS_ZH = {"paid": "已付款待发货", "shipped": "已发货", "delivered": "已签收"}


async def _change_address(
    text: str, order: dict[str, Any], address: str, ctx: TaskContext
) -> dict[str, Any]:
    order_id = order["order_id"]
    if order["status"] != "paid":
        return {
            "reply": pick(
                text,
                f"订单 {order_id} 已发货，无法修改地址。",
                f"Order {order_id} has shipped; its address can no longer change.",
            ),
            "changed": False,
            "handled_by": [ctx.agent_id],
        }
    await ctx.fence()  # a write: only while this instance still holds the task
    await (await store()).put_order(order_id, {**order, "address": address})
    return {
        "reply": pick(
            text,
            f"订单 {order_id} 的地址已改为：{address}",
            f"Order {order_id} now ships to {address}",
        ),
        "changed": True,
        "handled_by": [ctx.agent_id],
    }


async def _to_after_sales(text: str, order_id: str, ctx: TaskContext) -> dict[str, Any]:
    try:
        result = await ctx.handoff(
            f"return or refund order {order_id}: {text}",
            {"order_id": order_id, "text": text},
            target="cs.after_sales",
        )
    except DownstreamBusy:
        return {
            "reply": pick(text, "售后正忙，请稍后再试。", "After-sales is busy; please try later."),
            "degraded": "downstream_busy",
            "handled_by": [ctx.agent_id],
        }
    inner = result.output or {}
    out: dict[str, Any] = {
        "reply": inner.get("reply", ""),
        "handled_by": [ctx.agent_id, *inner.get("handled_by", [result.agent_id])],
    }
    code = result.error.code if result.error else inner.get("error")
    if code:
        out["error"] = code  # a loop stopped further down shows up here
        out["reply"] = out["reply"] or pick(
            text, f"转交失败：{code}。", f"The handoff failed: {code}."
        )
    return out
