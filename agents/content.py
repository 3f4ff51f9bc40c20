"""Content: writes reply texts from the shop's templates (apologies, notices, thanks).

Its template store can be down (the demo switches that on: `TEMPLATE_STORE`): every call
then fails, which is what opens its circuit breaker in the callers' routers.
"""

from __future__ import annotations

from typing import Any

from agents._contracts import ContentInput
from agents._data import TEMPLATE_STORE, is_chinese, said, store
from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

agent = Agent(
    "cs.content",
    "内容助手：撰写回复话术、道歉信、延误通知、感谢语等客服文案。"
    "不处理：查询订单、退款、物流等业务操作。 "
    "Content: writes customer replies: apology letters, delay notices, thank-you notes "
    "and other service wording. Does not look orders up or perform refunds or tracking.",
    examples=[
        "帮我写一段给客户的道歉话术",
        "写一条包裹延误的通知",
        "写一句感谢客户耐心等待的话",
        "write an apology message to the customer",
        "draft a delay notice for a late parcel",
        "write a thank-you note for a loyal customer",
    ],
    keywords=["话术", "文案", "道歉信", "draft", "wording", "write a message"],
    tags={"domain": "content"},
    input_model=ContentInput,
    name="内容助手 / Content",
)


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    shop = await store()
    if await shop.is_down(TEMPLATE_STORE):
        raise RuntimeError("the template store does not answer")
    text = said(task.capability, task.payload.get("text"))
    lang = task.payload.get("lang") or ("zh" if is_chinese(text) else "en")
    name = task.payload.get("template") or _guess(text)
    templates = await shop.table("templates")
    template = templates.get(name) or templates["thanks"]
    fields = {"ticket": "-", "eta": "3 days", **task.payload.get("fields", {})}
    return {
        "reply": template[lang].format(**fields),
        "template": name,
        "handled_by": [ctx.agent_id],
    }


def _guess(text: str) -> str:
    lowered = text.lower()
    if "道歉" in text or "apolog" in lowered or "sorry" in lowered:
        return "apology"
    if "延误" in text or "delay" in lowered or "late" in lowered:
        return "delay_notice"
    return "thanks"
