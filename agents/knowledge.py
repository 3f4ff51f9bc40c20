"""Knowledge base: answers policy and product questions from the shop's FAQ.

`answer` is the whole logic, a pure function of the question and the FAQ table, so the
same agent can run as a plain HTTP endpoint behind the HTTP bridge (``mesh bridge http``)
instead of as a Python worker: the demo's hook for that is
`agents.demo_script.KNOWLEDGE_BRIDGE`.
"""

from __future__ import annotations

from typing import Any

from agents._contracts import QuestionInput
from agents._data import is_chinese, pick, said, store
from mesh import Agent, TaskContext
from mesh.schemas import TaskEnvelope

agent = Agent(
    "cs.knowledge",
    "知识库：回答退货政策、保修、运费、发票、产品功能等常见问题，依据商城知识库。"
    "不处理：具体订单的操作（查单、退款、物流）。 "
    "Knowledge base: answers common questions from the shop's FAQ: return policy, "
    "warranty, shipping fees, company invoices and product features. Does not act on a "
    "particular order (look-ups, refunds, tracking).",
    examples=[
        "能开公司发票吗",
        "退货政策是什么，几天内可以退",
        "这款耳机有降噪功能吗",
        "do you offer free shipping",
        "how long is the warranty on electronics",
        "can I get a VAT invoice for my company",
    ],
    keywords=["发票", "保修", "运费", "政策", "invoice", "warranty", "policy", "faq"],
    tags={"domain": "knowledge"},
    input_model=QuestionInput,
    name="知识库 / Knowledge base",
)


def answer(question: str, faq: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The best FAQ entry for `question` (keyword hits), in the question's language."""
    lowered = question.lower()
    hits = {
        entry: sum(1 for word in item["keywords"] if word.lower() in lowered)
        for entry, item in faq.items()
    }
    best = max(hits, key=lambda entry: hits[entry], default=None)
    if best is None or hits[best] == 0:
        return {
            "reply": pick(
                question,
                "知识库里没有找到答案，已转人工。",
                "The knowledge base has no answer; a colleague will follow up.",
            ),
            "entry": None,
        }
    return {"reply": faq[best]["zh" if is_chinese(question) else "en"], "entry": best}


@agent.handler
async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
    question = said(task.capability, task.payload.get("text"))
    faq = await (await store()).table("faq")
    return {**answer(question, faq), "handled_by": [ctx.agent_id]}
