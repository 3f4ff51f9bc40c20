"""`HttpBridge`: the handler of an agent that lives behind an HTTP endpoint.

Each task is POSTed to the endpoint as JSON, and the endpoint's JSON object is the task's
output. Everything else is the worker's, as for any agent: claims and fencing, retries
through the delay queues, the deadline, output checks, and the router's breaker.

The request (`request_body`)::

    {"text": <the task's capability text>, "payload": {...}, "task_id": ..., "trace_id": ...,
     "deadline_ms": <epoch ms>, "attempt": <retries so far>}

with headers ``traceparent`` (W3C, the task's trace: `mesh.tracing.ids.traceparent`),
``x-mesh-task-id`` and ``x-mesh-deadline-ms``; the time the task has left is the request's
timeout. The answer:

| HTTP | outcome |
| --- | --- |
| 2xx with a JSON object | completed, the object is the output |
| 2xx with anything else | failed ``bad_http_response`` |
| 408, 429, 5xx; a timeout or a connection error | `Retry` (``Retry-After`` seconds as its delay) |
| any other 4xx (and 3xx not followed) | failed ``http_<status>``, details ``status`` and ``body`` |

At the deadline the worker cancels the call (the caller gets ``expired``).
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import TYPE_CHECKING, Any

import httpx

from mesh.errors import Fail, Retry
from mesh.redact import redact
from mesh.schemas import TaskEnvelope
from mesh.tracing.ids import is_traced, otel_trace_id, traceparent

if TYPE_CHECKING:
    from mesh.worker.context import TaskContext

logger = logging.getLogger(__name__)

#: statuses that say "later" rather than "no"
RETRIED_STATUSES = frozenset({408, 425, 429})
#: how much of an error answer's body the failed Result keeps
BODY_KEEP_CHARS = 1_000
#: the shortest timeout a request gets (a task with less left still tries once)
MIN_TIMEOUT_S = 0.05


def request_body(task: TaskEnvelope) -> dict[str, Any]:
    """What the endpoint receives for `task`."""
    return {
        "text": task.capability,
        "payload": task.payload,
        "task_id": task.task_id,
        "trace_id": task.trace_id,
        "deadline_ms": task.deadline_ms,
        "attempt": task.attempt,
    }


def _retry_after_ms(response: httpx.Response) -> int | None:
    value = response.headers.get("retry-after", "")
    try:
        return max(0, int(float(value) * 1000))
    except ValueError:
        return None


class HttpBridge:
    """An agent handler that forwards each task to `url` (``Agent(...).handler(bridge)``).

    The HTTP client opens on the first task (nothing is done at construction) and is shut
    by `aclose`.
    """

    def __init__(
        self,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        sample_ratio: float = 0.1,
        verify: bool | str = True,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self.headers = dict(headers or {})
        #: the share of low-priority traces marked sampled (``MESH_OTEL_SAMPLE_RATIO``)
        self.sample_ratio = sample_ratio
        self.verify = verify
        #: None: the network (tests pass an `httpx.MockTransport`)
        self.transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                headers=self.headers,
                follow_redirects=True,
                verify=self.verify,
                transport=self.transport,
            )
        return self._client

    async def aclose(self) -> None:
        """Close the HTTP client; safe to call twice."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def request_headers(self, task: TaskEnvelope) -> dict[str, str]:
        sampled = is_traced(otel_trace_id(task.trace_id), task.priority, self.sample_ratio)
        headers = {
            "traceparent": traceparent(task.trace_id, secrets.randbits(64), sampled=sampled),
            "x-mesh-task-id": task.task_id,
        }
        if task.deadline_ms is not None:
            headers["x-mesh-deadline-ms"] = str(task.deadline_ms)
        return headers

    async def __call__(self, task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        """POST the task; the endpoint's JSON object, or `Retry` / `Fail` (module table)."""
        timeout = max(MIN_TIMEOUT_S, ctx.time_left_ms() / 1000.0)
        try:
            response = await self._http().post(
                self.url,
                json=request_body(task),
                headers=self.request_headers(task),
                timeout=timeout,
            )
        except httpx.TimeoutException:
            raise Retry(f"the endpoint did not answer within {timeout:.3g} s") from None
        except httpx.TransportError as exc:
            raise Retry(f"the endpoint is unreachable: {type(exc).__name__}") from None
        status = response.status_code
        if status >= 500 or status in RETRIED_STATUSES:
            logger.info("task_id=%s: HTTP %d from the endpoint; retried", task.task_id, status)
            raise Retry(f"the endpoint answered HTTP {status}", _retry_after_ms(response))
        if not 200 <= status < 300:
            raise Fail(
                f"http_{status}",
                f"the endpoint refused the task: HTTP {status} {response.reason_phrase}",
                {"status": status, "body": redact(response.text[:BODY_KEEP_CHARS])},
            )
        try:
            output = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            output = None
        if not isinstance(output, dict):
            raise Fail(
                "bad_http_response",
                "the endpoint's answer is not a JSON object",
                {"status": status, "content_type": response.headers.get("content-type", "")},
            )
        return output


__all__ = ["BODY_KEEP_CHARS", "RETRIED_STATUSES", "HttpBridge", "request_body"]
