"""The codec names every bad field and keeps the raw bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mesh.schemas import InvalidEnvelope, TaskEnvelope, decode
from mesh.schemas.codec import peek


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (b"{not json", "(body)"),
        (b"[1, 2]", "(body)"),
        (b'{"capability": 5}', "capability"),
        (b'{"capability": "x", "priority": 0}', "priority"),
        (b'{"capability": "x", "payload": []}', "payload"),
        (b'{"capability": "x", "extra": 1}', "extra"),
        (b'{"capability": "x", "required_tags": {"k": 1}}', "required_tags.k"),
        (b"{}", "capability"),
        # strict, as the JSON Schemas say: a string is not an integer, nor a number a string
        (b'{"capability": "x", "priority": "5"}', "priority"),
        (b'{"capability": "x", "timeout_ms": "30000"}', "timeout_ms"),
        (b'{"capability": "x", "target": 7}', "target"),
    ],
)
def test_invalid_bodies_name_the_field(body: bytes, loc: str) -> None:
    with pytest.raises(InvalidEnvelope) as info:
        decode(TaskEnvelope, body)
    assert loc in {p.loc for p in info.value.problems}
    assert info.value.raw == body
    assert info.value.as_details()["errors"]


def test_every_bad_field_is_named_at_once() -> None:
    with pytest.raises(InvalidEnvelope) as info:
        decode(TaskEnvelope, b'{"capability": "", "priority": 11, "max_hops": 99, "x": 1}')
    assert {p.loc for p in info.value.problems} == {"capability", "priority", "max_hops", "x"}


def test_oversized_body_is_refused_before_parsing() -> None:
    body = b'{"capability": "x", "payload": {"b": "' + b"y" * 2_000_000 + b'"}}'
    with pytest.raises(InvalidEnvelope, match="limit"):
        decode(TaskEnvelope, body)


def test_peek_reads_reply_to_of_an_invalid_body() -> None:
    assert peek(b'{"reply_to": "q1", "priority": "high"}', "reply_to") == "q1"
    assert peek(b"{broken", "reply_to") is None
    assert peek(b'{"reply_to": 7}', "reply_to") is None


@given(st.binary(max_size=300))
def test_random_bytes_never_escape_as_another_error(body: bytes) -> None:
    try:
        decode(TaskEnvelope, body)
    except InvalidEnvelope as exc:
        assert exc.raw == body
