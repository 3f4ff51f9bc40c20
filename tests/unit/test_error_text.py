"""A handler's exception reaches the caller as its type and a message without secrets."""

from __future__ import annotations

from typing import Any

import pytest

from mesh import Agent, Retry, Settings, TaskContext
from mesh.redact import redact
from mesh.schemas import TaskEnvelope
from mesh.testing import AgentHarness
from mesh.worker.outcome import error_text, outcome_of_error

DSN = "postgresql://app:hunter2/x@db.internal:5432/orders"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"cannot reach {DSN}: timeout", "cannot reach postgresql://<redacted>: timeout"),
        ("auth failed (password=hunter2 host=db)", "auth failed (password=<redacted> host=db)"),
        ('{"api_key": "hunter2"} refused', '{"api_key": "<redacted>"} refused'),
        ("Authorization: Bearer hunter2hunter2", "Authorization: Bearer <redacted>"),
        ("dial app:hunter2@db:5432 refused", "dial <redacted>@db:5432 refused"),
        ("KeyError: 'order_id' in a/b", "KeyError: 'order_id' in a/b"),  # nothing secret
    ],
)
def test_redact_keeps_the_words_and_drops_the_secrets(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_the_outcome_of_an_error_names_its_type_without_the_password() -> None:
    failed = outcome_of_error(RuntimeError(f"cannot reach {DSN}"), "t-1")
    assert failed.kind == "failed" and failed.code == "handler_error"
    assert failed.message == "RuntimeError: cannot reach postgresql://<redacted>"
    retried = outcome_of_error(ConnectionError(f"{DSN} is down"))
    assert retried.kind == "retry" and "hunter2" not in retried.message
    assert error_text(ValueError("plain")) == "ValueError: plain"


async def test_a_caller_never_reads_the_database_url_a_handler_failed_on() -> None:
    agent = Agent("orders", "Looks up orders")

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        raise RuntimeError(f"could not connect to {DSN} (password=hunter2)")

    result = await AgentHarness(agent, settings=Settings()).run({"order": 1})
    assert result.status == "failed" and result.error is not None
    assert result.error.code == "handler_error"
    assert "hunter2" not in result.error.message and "db.internal" not in result.error.message
    assert result.error.message.startswith("RuntimeError: could not connect to postgresql://")


async def test_an_agent_that_allows_it_passes_its_exception_text_unredacted() -> None:
    agent = Agent("orders", "Looks up orders", expose_errors=True)

    @agent.handler
    async def handle(task: TaskEnvelope, ctx: TaskContext) -> dict[str, Any]:
        raise RuntimeError(f"could not connect to {DSN}")

    result = await AgentHarness(agent, settings=Settings()).run({"order": 1})
    assert result.error is not None and result.error.code == "handler_error"
    assert result.error.message == f"RuntimeError: could not connect to {DSN}"


def test_retry_says_its_delay_is_rounded_up_and_refuses_a_delay_below_1() -> None:
    doc = Retry.__doc__ or ""
    assert "rounded *up* to the next delay" in doc and "MESH_RETRY_DELAYS_MS" in doc
    assert Retry("x", delay_ms=200).delay_ms == 200
    with pytest.raises(ValueError, match="at least 1 ms, got 0"):
        Retry("x", delay_ms=0)
