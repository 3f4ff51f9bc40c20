"""Every bound of the wire models, and the JSON Schema drift check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from mesh.schemas import (
    WIRE_MODELS,
    Bid,
    Event,
    Heartbeat,
    Registration,
    RegistrationAck,
    Result,
    TaskEnvelope,
    decode,
    encode,
)
from mesh.schemas.export import render

ROOT = Path(__file__).resolve().parents[2]
#: the JSON Schemas a checkout commits for agents in other languages
JSON_DIR = ROOT / "schemas" / "json"


def envelope(**fields: Any) -> TaskEnvelope:
    return TaskEnvelope(**{"capability": "refund order 42", **fields})


@given(st.integers(min_value=1, max_value=10))
def test_priority_in_range_is_accepted(p: int) -> None:
    assert envelope(priority=p).priority == p


@given(st.one_of(st.integers(max_value=0), st.integers(min_value=11)))
def test_priority_out_of_range_is_refused(p: int) -> None:
    with pytest.raises(ValidationError, match="priority"):
        envelope(priority=p)


def test_defaults_match_the_design() -> None:
    e = envelope()
    assert (e.priority, e.timeout_ms, e.max_hops, e.hops) == (5, 30_000, 5, 0)
    assert e.task_id != envelope().task_id


@given(st.integers(min_value=100, max_value=3_600_000))
def test_timeout_in_range(t: int) -> None:
    assert envelope(timeout_ms=t).timeout_ms == t


@given(st.one_of(st.integers(max_value=99), st.integers(min_value=3_600_001)))
def test_timeout_out_of_range(t: int) -> None:
    with pytest.raises(ValidationError, match="timeout_ms"):
        envelope(timeout_ms=t)


@given(st.integers(min_value=0, max_value=20))
def test_max_hops_in_range(h: int) -> None:
    assert envelope(max_hops=h).max_hops == h


@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=21)))
def test_max_hops_out_of_range(h: int) -> None:
    with pytest.raises(ValidationError, match="max_hops"):
        envelope(max_hops=h)


@given(st.text(min_size=1, max_size=4_000).filter(lambda s: len(s) <= 4_000))
def test_capability_length_accepted(text: str) -> None:
    assert envelope(capability=text).capability == text


@pytest.mark.parametrize("text", ["", "x" * 4_001])
def test_capability_length_refused(text: str) -> None:
    with pytest.raises(ValidationError, match="capability"):
        envelope(capability=text)


def test_payload_limit_is_one_mebibyte_by_default_and_configurable() -> None:
    big = {"blob": "x" * (1 << 20)}
    with pytest.raises(ValidationError, match="limit is 1048576"):
        envelope(payload=big)
    small = {"blob": "x" * 2_000}
    body = encode(envelope(payload=small))
    assert decode(TaskEnvelope, body).payload == small
    with pytest.raises(ValueError, match="limit is 1024"):
        decode(TaskEnvelope, body, max_payload_bytes=1024)


def test_models_are_frozen_and_refuse_extra_fields() -> None:
    e = envelope()
    with pytest.raises(ValidationError):
        e.priority = 3  # type: ignore[misc]
    with pytest.raises(ValidationError, match="Extra inputs"):
        TaskEnvelope(capability="x", surprise=1)  # type: ignore[call-arg]


@pytest.mark.parametrize(
    ("model", "data", "field"),
    [
        (Result, {"task_id": "t", "status": "done"}, "status"),
        (
            Registration,
            {"agent_id": "a", "instance_id": "i", "capability_text": ""},
            "capability_text",
        ),
        (Registration, {"agent_id": "a b", "instance_id": "i", "capability_text": "x"}, "agent_id"),
        (
            Registration,
            {"agent_id": "a", "instance_id": "i", "capability_text": "x", "max_concurrency": 0},
            "max_concurrency",
        ),
        (
            RegistrationAck,
            {"agent_id": "a", "instance_id": "i", "token": 0, "lease_ttl_s": 1, "heartbeat_s": 1},
            "token",
        ),
        (
            Heartbeat,
            {"agent_id": "a", "instance_id": "i", "token": 1, "in_flight": -1, "sent_ms": 0},
            "in_flight",
        ),
        (
            Bid,
            {"task_id": "t", "agent_id": "a", "instance_id": "i", "confidence": 1.5},
            "confidence",
        ),
        (Event, {"type": "nonsense"}, "type"),
    ],
)
def test_other_models_bounds(model: Any, data: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        model.model_validate(data)


@given(
    st.builds(
        TaskEnvelope,
        capability=st.text(min_size=1, max_size=50),
        priority=st.integers(1, 10),
        payload=st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1)),
    )
)
def test_envelope_round_trips_through_the_codec(e: TaskEnvelope) -> None:
    assert decode(TaskEnvelope, encode(e)) == e


def test_json_schemas_have_not_drifted() -> None:
    rendered = render()
    assert set(rendered) == {f"{stem}.schema.json" for stem in WIRE_MODELS}
    for name, data in rendered.items():
        assert (JSON_DIR / name).read_bytes() == data, (
            f"{name} drifted: run `mesh schemas export --out schemas/json`"
        )
