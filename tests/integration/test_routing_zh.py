"""The seeds' Chinese routing cases on the real broker with the real (offline) model.

Seed 002 section 2.1: one intent, many wordings ("这个用不了我要退", "帮我取消订单" are both
"I want to return it") must reach the after-sales agent of a customer-service team. Seed 003
section 4.3: "数据分析" next to "销售数据分析", where the sales agent's keywords (销售, 业绩,
营收, 订单量) earn it a boost; section 1.1: "帮我看看销售数据为什么下滑" must not land on the
knowledge-base agent. The agents' texts are written here, after the seeds' descriptions.
"""

from __future__ import annotations

import asyncio

import pytest

from mesh.client import MeshClient
from mesh.connection import MeshConnection
from tests.conftest import wait_until
from tests.integration.routing_kit import EventTap, SemanticMesh, agent

pytestmark = pytest.mark.integration


SUPPORT_TEAM = [
    agent(
        "presales",
        "售前咨询：在购买之前回答产品功能、价格、库存和优惠活动的问题。",
        ["这款手机有几种颜色", "现在买有优惠吗", "这个型号还有货吗"],
    ),
    agent(
        "aftersales",
        "售后服务：处理退货、换货、退款和取消订单。",
        ["我想退货", "收到的东西坏了能换一个吗", "退款什么时候到账"],
    ),
    agent(
        "logistics",
        "物流查询：快递、配送进度、发货时间和包裹签收。",
        ["我的快递到哪了", "什么时候发货", "包裹显示签收了但我没收到"],
    ),
    agent(
        "complaints",
        "投诉建议：受理对服务态度和商品质量的投诉与建议。",
        ["我要投诉你们的客服", "你们的服务太差了", "我有一个建议"],
    ),
    agent(
        "techsupport",
        "技术支持：产品的安装、使用方法、故障排查和软件升级。",
        ["这个怎么安装", "开不了机怎么办", "软件怎么升级"],
    ),
]

DATA_TEAM = [
    agent(
        "knowledge",
        "检索知识库：查找公司内部文档、制度和产品手册。",
        ["帮我找一下报销制度的文档", "产品手册在哪里"],
    ),
    agent(
        "logs",
        "日志分析：日志采集、错误码定位和异常检测。",
        ["帮我看看这个报错码是啥", "昨天的系统错误日志"],
    ),
    agent(
        "analytics",
        "数据分析：对各类业务数据做统计分析和图表。",
        ["统计一下用户增长", "做一个数据透视表"],
    ),
    agent(
        "sales-data",
        "销售数据分析：分析销售额、业绩、营收和订单量的变化。",
        ["上个月的销售额是多少", "各地区的业绩对比"],
        keywords=["销售", "业绩", "营收", "订单量"],
    ),
]


async def route_all(conn: MeshConnection, cases: dict[str, str]) -> None:
    async with MeshClient(conn) as client:
        results = await asyncio.gather(*(client.request(t, wait_s=20) for t in cases))
    for (text, expected), result in zip(cases.items(), results, strict=True):
        assert result.status == "completed", (text, result)
        assert result.output == {"by": expected}, text


async def test_one_return_intent_in_many_wordings_reaches_after_sales(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(*SUPPORT_TEAM)
    await route_all(
        conn,
        {
            "这个用不了我要退": "aftersales",
            "帮我取消订单": "aftersales",
            "我要退货": "aftersales",
            "我的包裹三天了还没到": "logistics",
            "你们这个产品怎么安装": "techsupport",
        },
    )


async def test_sales_data_beats_data_analysis_with_its_keywords(
    mesh: SemanticMesh, conn: MeshConnection
) -> None:
    await mesh.start(*DATA_TEAM)
    tap = await EventTap(conn, "route.decision").start()
    cases = {
        "分析一下最近的销售数据走势": "sales-data",
        "帮我看看销售数据为什么下滑": "sales-data",
        "销售数据分析": "sales-data",
        "数据分析": "analytics",
        "查一下报销制度的文档": "knowledge",
    }
    await route_all(conn, cases)
    await wait_until(lambda: len(tap.of("route.decision")) == len(cases), timeout=10)
    # the keyword boost of a Chinese keyword counts inside a sentence without spaces
    by_text = {e.data["capability"]: e for e in tap.of("route.decision")}
    for text in ("分析一下最近的销售数据走势", "帮我看看销售数据为什么下滑"):
        parts = {c["agent_id"]: c for c in by_text[text].data["candidates"]}
        assert parts["sales-data"]["keyword"] > 0, text
        assert parts["analytics"]["keyword"] == 0, text
    parts = {c["agent_id"]: c for c in by_text["数据分析"].data["candidates"]}
    assert parts["sales-data"]["keyword"] == 0
