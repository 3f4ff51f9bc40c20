"""The team's input contracts (`Agent(input_model=...)`): what each agent's payload may hold.

Every field is optional (a routed request carries what the customer gave, often nothing:
the agents read the text), but a field of another name is refused: a caller that sends
``order_no`` where the orders agent reads ``order_id`` (seed 000 section 2.3) gets
``bad_payload`` naming the field, before any handler runs.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

#: the shop's order ids (A-1001) and tracking numbers (SF + 10 digits)
ORDER_PATTERN = r"^A-\d{4}$"
TRACKING_PATTERN = r"^SF\d{10}$"


class _Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")

    #: the customer's own words, when a handoff passes them on
    text: str | None = Field(default=None, max_length=2_000)


class ReceptionInput(_Contract):
    order_id: str | None = Field(default=None, pattern=ORDER_PATTERN)


class OrderChange(BaseModel):
    model_config = ConfigDict(extra="forbid")

    address: str = Field(min_length=3, max_length=200)


class OrdersInput(_Contract):
    order_id: str | None = Field(default=None, pattern=ORDER_PATTERN)
    change: OrderChange | None = None


class AfterSalesInput(_Contract):
    order_id: str | None = Field(default=None, pattern=ORDER_PATTERN)
    reason: str | None = Field(default=None, max_length=500)


class LogisticsInput(_Contract):
    order_id: str | None = Field(default=None, pattern=ORDER_PATTERN)
    tracking_no: str | None = Field(default=None, pattern=TRACKING_PATTERN)


class ComplaintInput(_Contract):
    order_id: str | None = Field(default=None, pattern=ORDER_PATTERN)


class ContentInput(_Contract):
    template: str | None = Field(default=None, pattern=r"^[a-z_]{1,40}$")
    fields: dict[str, str] = Field(default_factory=dict)
    lang: str | None = Field(default=None, pattern=r"^(zh|en)$")


class QuestionInput(_Contract):
    pass


class LogInput(_Contract):
    log: str | None = Field(default=None, max_length=20_000)
