"""The customer-service team's business data: what it holds, where, and how it is seeded.

Everything lives in Redis under the demo's key prefix (`mesh.keys.Keys.demo`:
``<ns>:demo:<name>``), next to the mesh's own keys of the same namespace, so deleting a
namespace deletes its shop too. The agents open their own client (`Store.open`): a
handler gets no Redis client from the mesh, the shop is the application's store.

=======================  ====================================================
key                      value
=======================  ====================================================
``demo:order:<id>``      JSON order (customer, item, amount, status, parcel)
``demo:parcel:<no>``     JSON parcel (carrier, status, scans, eta)
``demo:refund:<order>``  JSON refund record, written by after-sales
``demo:faq``             hash: entry id -> JSON question / answer, zh and en
``demo:errors``          hash: error code -> JSON meaning and fix, zh and en
``demo:templates``       hash: template name -> JSON reply text, zh and en
``demo:tickets``         list: complaint tickets, JSON
``demo:outage:<name>``   a simulated outage the demo switches on and off
=======================  ====================================================

The money side of a refund is not here: it is the mesh's exactly-once counter
``<ns>:effect:refund:<order>`` (`refund_effect`), added to by ``ctx.apply_once``.
"""

from __future__ import annotations

import re
from typing import Any

from mesh.access.roles import vhost_of
from mesh.config import Settings
from mesh.keys import Keys
from mesh.redis_pool import Redis, redis_client
from mesh.schemas.codec import dumps, loads

#: an order id as the shop writes it (A-1001), a tracking number (SF + 10 digits)
ORDER_ID = re.compile(r"\bA-\d{4}\b")
TRACKING_NO = re.compile(r"\bSF\d{10}\b")
_CJK = re.compile(r"[\u4e00-\u9fff]")

#: the demo's simulated outages (`Store.outage`)
CARRIER_API = "carrier-api"  # the next N tracking calls hang (a frozen handler)
TEMPLATE_STORE = "template-store"  # the content agent's template store is down


def is_chinese(text: str) -> bool:
    """Does `text` contain Chinese characters (the team answers in the customer's language)?"""
    return bool(_CJK.search(text))


def pick(text: str, zh: str, en: str) -> str:
    """`zh` for a Chinese `text`, else `en`."""
    return zh if is_chinese(text) else en


def refund_effect(order_id: str) -> str:
    """The `apply_once` counter of an order's refund (``<ns>:effect:refund:<order>``)."""
    return f"refund:{order_id}"


ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {
        "customer": "Li Wei",
        "item_zh": "智能手机 X5",
        "item_en": "X5 smartphone",
        "amount": 2999.0,
        "status": "delivered",
        "delivered_days_ago": 26,
        "parcel": "SF1000000001",
        "address": "上海市徐汇区漕溪北路 88 号",
    },
    "A-1002": {
        "customer": "Emma Brown",
        "item_en": "noise-cancelling headphones",
        "item_zh": "降噪耳机",
        "amount": 899.0,
        "status": "shipped",
        "parcel": "SF1000000002",
        "address": "12 Baker Street, London",
    },
    "A-1003": {
        "customer": "Zhang Min",
        "item_zh": "运动鞋（42 码）",
        "item_en": "running shoes (EU 42)",
        "amount": 459.0,
        "status": "delivered",
        "delivered_days_ago": 3,
        "parcel": "SF1000000003",
        "address": "北京市海淀区中关村大街 1 号",
    },
    "A-1004": {
        "customer": "Tom Miller",
        "item_en": "coffee grinder",
        "item_zh": "咖啡磨豆机",
        "amount": 329.0,
        "status": "paid",
        "parcel": None,
        "address": "5 Rue de Rivoli, Paris",
    },
    "A-1005": {
        "customer": "Wang Fang",
        "item_zh": "空气净化器",
        "item_en": "air purifier",
        "amount": 1599.0,
        "status": "delivered",
        "delivered_days_ago": 45,
        "parcel": "SF1000000005",
        "address": "广州市天河区体育西路 3 号",
    },
    "A-1006": {
        "customer": "Sara Lopez",
        "item_en": "e-book reader",
        "item_zh": "电子书阅读器",
        "amount": 699.0,
        "status": "delivered",
        "delivered_days_ago": 5,
        "parcel": "SF1000000006",
        "address": "Calle Mayor 7, Madrid",
    },
    # refunded through the bank: its gateway confirms slowly (the SIGKILL story)
    "A-1007": {
        "customer": "Chen Jie",
        "item_zh": "机械键盘",
        "item_en": "mechanical keyboard",
        "amount": 549.0,
        "status": "delivered",
        "delivered_days_ago": 2,
        "parcel": "SF1000000007",
        "address": "杭州市西湖区文三路 20 号",
        "gateway_ms": 2500,
    },
    # a price dispute both orders and after-sales think the other one owns (seed 000 4.4)
    "A-1008": {
        "customer": "Liu Yang",
        "item_zh": "扫地机器人",
        "item_en": "robot vacuum",
        "amount": 1999.0,
        "status": "delivered",
        "delivered_days_ago": 4,
        "parcel": "SF1000000008",
        "address": "成都市锦江区春熙路 9 号",
        "dispute": "price",
    },
}

PARCELS: dict[str, dict[str, Any]] = {
    "SF1000000001": {"carrier": "SF Express", "status": "delivered", "eta": None},
    "SF1000000002": {
        "carrier": "SF Express",
        "status": "in_transit",
        "last_scan_zh": "已到达上海转运中心",
        "last_scan_en": "arrived at the Shanghai sorting centre",
        "eta": "2 days",
    },
    "SF1000000003": {"carrier": "SF Express", "status": "delivered", "eta": None},
    "SF1000000005": {"carrier": "SF Express", "status": "delivered", "eta": None},
    "SF1000000006": {"carrier": "SF Express", "status": "delivered", "eta": None},
    "SF1000000007": {"carrier": "SF Express", "status": "delivered", "eta": None},
    "SF1000000008": {"carrier": "SF Express", "status": "delivered", "eta": None},
    "SF1000000009": {
        "carrier": "SF Express",
        "status": "delayed",
        "last_scan_zh": "因天气原因滞留在武汉",
        "last_scan_en": "held in Wuhan by bad weather",
        "eta": "4 days",
    },
}

FAQ: dict[str, dict[str, Any]] = {
    "invoice": {
        "keywords": ["发票", "invoice", "抬头", "vat"],
        "zh": "可以开具公司发票：在订单详情页点“申请发票”，填写公司抬头和税号，"
        "3 个工作日内发到邮箱。",
        "en": "Company invoices are available: open the order, choose 'Request invoice', "
        "enter the company name and tax number; it is emailed within 3 working days.",
    },
    "return_policy": {
        "keywords": ["退货政策", "几天", "return policy", "days to return", "无理由"],
        "zh": "签收后 30 天内可无理由退货，商品需完好；退款在收到退货后 1-3 个工作日原路退回。",
        "en": "Items can be returned within 30 days of delivery in their original state; "
        "the refund goes back to the original payment 1-3 working days after we receive it.",
    },
    "warranty": {
        "keywords": ["保修", "warranty", "质保"],
        "zh": "电子产品保修一年，凭订单号即可申请保修。",
        "en": "Electronics carry a one-year warranty; the order number is all you need.",
    },
    "shipping_fee": {
        "keywords": ["运费", "包邮", "shipping fee", "shipping cost", "free shipping"],
        "zh": "订单满 99 元包邮，不满收 8 元运费。",
        "en": "Shipping is free from 99 yuan; below that it costs 8 yuan.",
    },
    "noise_cancelling": {
        "keywords": ["降噪", "noise cancelling", "noise-cancelling", "anc"],
        "zh": "降噪耳机支持主动降噪，续航 30 小时，可连接两台设备。",
        "en": "The headphones have active noise cancelling, 30 hours of battery and connect "
        "to two devices at once.",
    },
}

ERROR_CODES: dict[str, dict[str, str]] = {
    # the mesh's own codes, as callers and the dead-letter queues show them
    "downstream_busy": {
        "zh": "下游 Agent 的熔断器已打开，路由器立即拒绝了这次调用。",
        "en": "the downstream agent's circuit breaker is open; the router refused the call at once",
        "fix": "mesh stats (breaker column); fix the failing agent, the breaker half-opens",
    },
    "max_hops_exceeded": {
        "zh": "任务接力次数超过 max_hops，疑似两个 Agent 互相转交（环路）。",
        "en": "the task was handed on more than max_hops times: two agents passing it back "
        "and forth",
        "fix": "mesh trace <trace_id>; add 'does not handle' lines to both capability texts",
    },
    "bad_payload": {
        "zh": "任务参数不符合目标 Agent 的输入契约（字段名或类型不对）。",
        "en": "the payload does not fit the target agent's input contract",
        "fix": "mesh agents --schemas shows each agent's contract",
    },
    "invalid_envelope": {
        "zh": "消息不是合法的任务信封，已进入 dead.invalid 死信队列。",
        "en": "the message was not a valid task envelope; it went to the dead.invalid queue",
        "fix": "mesh dlq list invalid",
    },
    "handler_error": {
        "zh": "Agent 的处理函数抛出了异常。",
        "en": "the agent's handler raised an exception",
        "fix": "the worker's log, by task_id",
    },
    "expired": {
        "zh": "任务在截止时间前没有完成。",
        "en": "the task did not finish before its deadline",
        "fix": "mesh trace <trace_id> shows where the time went",
    },
    # the shop's own systems
    "PAY-4021": {
        "zh": "支付网关拒绝退款：原支付渠道已关闭。",
        "en": "payment gateway refused the refund: the original payment channel is closed",
        "fix": "refund to the customer's balance instead",
    },
    "WMS-503": {
        "zh": "仓储系统暂时不可用，出库单未生成。",
        "en": "the warehouse system is unavailable; no picking list was created",
        "fix": "retry in 5 minutes; check the WMS status page",
    },
    "SF-1102": {
        "zh": "快递公司接口超时。",
        "en": "the courier's tracking API timed out",
        "fix": "the logistics agent's processing timeout hands the task to another instance",
    },
}

TEMPLATES: dict[str, dict[str, str]] = {
    "apology": {
        "zh": "非常抱歉给您带来不好的体验，我们已记录您的反馈（工单 {ticket}），"
        "专人会在 24 小时内联系您。",
        "en": "We are very sorry for the trouble. Your feedback is on record (ticket {ticket}) "
        "and a colleague will contact you within 24 hours.",
    },
    "thanks": {
        "zh": "感谢您的耐心等待，祝您购物愉快！",
        "en": "Thank you for your patience, and enjoy your purchase!",
    },
    "delay_notice": {
        "zh": "您的包裹因天气原因延误，我们会持续跟进，预计 {eta} 内送达。",
        "en": "Your parcel is delayed by the weather; we are following it and expect it "
        "within {eta}.",
    },
}


class Store:
    """The shop's data in Redis, for one namespace: ``await Store.open()`` in a handler."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        client = redis_client(
            settings.redis_url.get_secret_value(),
            sentinels=settings.redis_sentinels,
            master=settings.redis_sentinel_master,
        )
        return cls(client, Keys(settings.namespace, vhost_of(settings)))

    # --- reads -----------------------------------------------------------------------------
    async def _json(self, name: str) -> dict[str, Any] | None:
        raw = await self.redis.get(self.keys.demo(name))
        return loads(raw) if raw is not None else None

    async def order(self, order_id: str) -> dict[str, Any] | None:
        found = await self._json(f"order:{order_id}")
        return {"order_id": order_id, **found} if found is not None else None

    async def parcel(self, tracking_no: str) -> dict[str, Any] | None:
        found = await self._json(f"parcel:{tracking_no}")
        return {"tracking_no": tracking_no, **found} if found is not None else None

    async def refund(self, order_id: str) -> dict[str, Any] | None:
        return await self._json(f"refund:{order_id}")

    async def table(self, name: str) -> dict[str, dict[str, Any]]:
        """A hash of JSON values (``faq``, ``errors``, ``templates``) as a dict."""
        raw = await self.redis.hgetall(self.keys.demo(name))
        return {k.decode(): loads(v) for k, v in raw.items()}

    async def outage(self, name: str) -> int:
        """Take one call's share of the outage `name`: how many calls were still to fail
        before this one (> 0: this call fails or hangs)."""
        left = await self.redis.decr(self.keys.demo(f"outage:{name}"))
        return int(left) + 1

    async def is_down(self, name: str) -> bool:
        """Is the service `name` down for as long as the outage is switched on?"""
        return bool(await self.redis.exists(self.keys.demo(f"down:{name}")))

    # --- writes ----------------------------------------------------------------------------
    async def put_order(self, order_id: str, order: dict[str, Any]) -> None:
        body = {k: v for k, v in order.items() if k != "order_id"}
        await self.redis.set(self.keys.demo(f"order:{order_id}"), dumps(body))

    async def put_refund(self, order_id: str, record: dict[str, Any]) -> None:
        await self.redis.set(self.keys.demo(f"refund:{order_id}"), dumps(record))

    async def file_ticket(self, ticket: dict[str, Any]) -> int:
        """Append a complaint ticket; returns its number (1, 2, ...)."""
        return int(await self.redis.rpush(self.keys.demo("tickets"), dumps(ticket)))

    # --- the demo's switches -----------------------------------------------------------------
    async def seed(self) -> None:
        """Write the shop's data (replacing an earlier seed of this namespace)."""
        pipe = self.redis.pipeline(transaction=False)
        for order_id, order in ORDERS.items():
            pipe.set(self.keys.demo(f"order:{order_id}"), dumps(order))
            pipe.delete(self.keys.demo(f"refund:{order_id}"))
        for number, parcel in PARCELS.items():
            pipe.set(self.keys.demo(f"parcel:{number}"), dumps(parcel))
        for name, table in (("faq", FAQ), ("errors", ERROR_CODES), ("templates", TEMPLATES)):
            pipe.delete(self.keys.demo(name))
            pipe.hset(self.keys.demo(name), mapping={k: dumps(v) for k, v in table.items()})
        pipe.delete(self.keys.demo("tickets"))
        for name in (CARRIER_API, TEMPLATE_STORE):
            pipe.delete(self.keys.demo(f"outage:{name}"), self.keys.demo(f"down:{name}"))
        await pipe.execute()

    async def fail_next(self, name: str, calls: int) -> None:
        """The next `calls` calls of `name` fail or hang (`outage`)."""
        await self.redis.set(self.keys.demo(f"outage:{name}"), calls)

    async def take_down(self, name: str, down: bool = True) -> None:
        """Switch the outage of `name` on or off (`is_down`)."""
        if down:
            await self.redis.set(self.keys.demo(f"down:{name}"), 1)
        else:
            await self.redis.delete(self.keys.demo(f"down:{name}"))

    async def close(self) -> None:
        await self.redis.aclose()


_store: Store | None = None


async def store() -> Store:
    """The store of this worker process (opened on first use from ``MESH_*`` settings)."""
    global _store
    if _store is None:
        _store = Store.from_settings(Settings.from_env())
    return _store


def said(task_text: str, payload_text: str | None) -> str:
    """What the customer said: the payload's ``text`` (a handoff's), else the request."""
    return payload_text or task_text


def find_order_id(text: str) -> str | None:
    found = ORDER_ID.search(text)
    return found.group(0) if found else None


def find_tracking_no(text: str) -> str | None:
    found = TRACKING_NO.search(text)
    return found.group(0) if found else None


__all__ = [
    "CARRIER_API",
    "ERROR_CODES",
    "FAQ",
    "ORDERS",
    "PARCELS",
    "TEMPLATES",
    "TEMPLATE_STORE",
    "Store",
    "find_order_id",
    "find_tracking_no",
    "is_chinese",
    "pick",
    "refund_effect",
    "said",
    "store",
]
