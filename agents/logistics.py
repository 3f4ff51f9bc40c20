"""Logistics: tracks parcels by tracking number or order id.

The courier's API can hang (the demo switches that on: `CARRIER_API`): the handler then
shows no progress, and after ``processing_timeout_s`` its worker cancels it and hands the
task back to the agent's queue, where another instance completes it (seed 002 7.4, the
orphan task). Run two instances.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents._contracts import LogisticsInput
from agents._data import CARRIER_API, find_order_id, find_tracking_no, pick, said, store
from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

agent = Agent(
    "cs.logistics",
    "物流助手：查询快递和包裹的物流轨迹、配送进度、预计送达时间，处理延误和丢件查询；需要运单号或订单号。"
    "不处理：退款退货、订单修改、投诉。 "
    "Logistics: tracks parcels and deliveries (where a package is, when it arrives, delays "
    "and lost parcels); needs a tracking number or order id. Does not handle refunds, "
    "order changes or complaints.",
    examples=[
        "我的快递到哪了",
        "物流三天没更新了",
        "包裹什么时候能送到",
        "where is my parcel",
        "my package has not arrived yet",
        "track shipment SF1000000002",
    ],
    keywords=["快递", "物流", "包裹", "运单", "parcel", "package", "tracking", "delivery"],
    tags={"domain": "logistics"},
    input_model=LogisticsInput,
    #: a tracking call that shows no progress for this long is frozen: another instance
    #: gets the task (the demo's courier API hangs once)
    processing_timeout_s=2.0,
    name="物流助手 / Logistics",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    text = said(task.capability, task.payload.get("text"))
    shop = await store()
    number = task.payload.get("tracking_no") or find_tracking_no(text)
    order_id = task.payload.get("order_id") or find_order_id(text)
    if number is None and order_id is not None:
        order = await shop.order(order_id)
        number = order.get("parcel") if order else None
    if number is None:
        return {
            "reply": pick(text, "请提供运单号或订单号。", "Which tracking number or order?"),
            "handled_by": [ctx.agent_id],
        }
    if await shop.outage(CARRIER_API) > 0:
        # the courier's API never answers: no ctx.progress(), the watchdog takes over
        await asyncio.Event().wait()
    parcel = await shop.parcel(number)
    if parcel is None:
        return {
            "reply": pick(text, f"查不到运单 {number}。", f"No parcel {number} found."),
            "handled_by": [ctx.agent_id],
        }
    status = parcel["status"]
    if status == "delivered":
        reply = pick(text, f"运单 {number} 已签收。", f"Parcel {number} was delivered.")
    else:
        reply = pick(
            text,
            f"运单 {number}：{parcel['last_scan_zh']}，预计 {parcel['eta']} 内送达。",
            f"Parcel {number}: {parcel['last_scan_en']}; expected within {parcel['eta']}.",
        )
    return {
        "reply": reply,
        "tracking_no": number,
        "status": status,
        "by": ctx.instance_id,
        "handled_by": [ctx.agent_id],
    }
