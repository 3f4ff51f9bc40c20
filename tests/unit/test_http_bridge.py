"""`HttpBridge`'s mapping of HTTP answers onto outcomes, on httpx's mock transport."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from mesh.bridge import HttpBridge
from mesh.errors import Fail, Retry
from mesh.schemas import TaskEnvelope
from mesh.tracing.ids import traceparent


class Ctx:
    def __init__(self, left_ms: int) -> None:
        self.left_ms = left_ms

    def time_left_ms(self) -> int:
        return self.left_ms


def bridge(answer: httpx.Response, seen: list[httpx.Request]) -> HttpBridge:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answer

    return HttpBridge("http://kb.test/ask", transport=httpx.MockTransport(handle))


TASK = TaskEnvelope(capability="return policy?", payload={"q": 1}, deadline_ms=123, priority=5)


async def call(answer: httpx.Response, left_ms: int = 2500) -> tuple[Any, httpx.Request]:
    seen: list[httpx.Request] = []
    b = bridge(answer, seen)
    try:
        return await b(TASK, Ctx(left_ms)), seen[0]  # type: ignore[arg-type]
    finally:
        await b.aclose()


async def test_a_json_object_is_the_output_and_the_request_carries_the_task() -> None:
    out, request = await call(httpx.Response(200, json={"answer": 42}))
    assert out == {"answer": 42}
    assert json.loads(request.content) == {
        "text": "return policy?",
        "payload": {"q": 1},
        "task_id": TASK.task_id,
        "trace_id": TASK.trace_id,
        "deadline_ms": 123,
        "attempt": 0,
    }
    assert request.extensions["timeout"] == {"connect": 2.5, "read": 2.5, "write": 2.5, "pool": 2.5}
    assert request.headers["traceparent"].startswith(f"00-{TASK.trace_id}-")
    assert request.headers["traceparent"].endswith("-01")  # priority 5: always sampled
    assert request.headers["x-mesh-deadline-ms"] == "123"


@pytest.mark.parametrize("status", [500, 503, 408, 429])
async def test_server_errors_and_throttling_are_retried(status: int) -> None:
    with pytest.raises(Retry) as caught:
        await call(httpx.Response(status, headers={"Retry-After": "2"}))
    assert caught.value.delay_ms == 2000


async def test_a_4xx_is_a_failure_with_its_status() -> None:
    with pytest.raises(Fail) as caught:
        await call(httpx.Response(404, text="no such article, token=abc123"))
    assert caught.value.code == "http_404"
    assert caught.value.details == {"status": 404, "body": "no such article, token=<redacted>"}


@pytest.mark.parametrize("answer", [httpx.Response(200, json=[1]), httpx.Response(200, text="x")])
async def test_an_answer_that_is_not_a_json_object_fails(answer: httpx.Response) -> None:
    with pytest.raises(Fail) as caught:
        await call(answer)
    assert caught.value.code == "bad_http_response"


async def test_a_timeout_is_retried() -> None:
    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    b = HttpBridge("http://kb.test/ask", transport=httpx.MockTransport(slow))
    with pytest.raises(Retry):
        await b(TASK, Ctx(100))  # type: ignore[arg-type]
    await b.aclose()


def test_traceparent_of_a_non_hex_trace_id_is_its_digest() -> None:
    value = traceparent("order-42", 5, sampled=False)
    assert value.startswith("00-") and value.endswith("-0000000000000005-00")
    assert len(value.split("-")[1]) == 32
