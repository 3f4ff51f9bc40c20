"""Why RabbitMQ dead-lettered a dispatch, read from its headers."""

from __future__ import annotations

from mesh.router.reasons import death_reason


def test_first_death_reason_header_wins() -> None:
    headers = {"x-first-death-reason": b"expired", "x-death": [{"reason": b"rejected"}]}
    assert death_reason(headers) == "expired"


def test_falls_back_to_the_first_x_death_entry() -> None:
    assert death_reason({"x-death": [{"reason": "delivery_limit"}, {"reason": "expired"}]}) == (
        "delivery_limit"
    )
    assert death_reason({"x-death": [{"reason": b"rejected"}]}) == "rejected"


def test_unknown_when_nothing_says() -> None:
    assert death_reason({}) == "unknown"
    assert death_reason({"x-death": []}) == "unknown"
    assert death_reason({"x-death": ["garbage"]}) == "unknown"
