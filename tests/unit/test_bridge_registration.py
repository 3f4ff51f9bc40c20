"""Registration files of bridged agents: a Python agent's fields round-trip, mistakes are
refused with the file named."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from agents import knowledge
from mesh.bridge.registration import load_registration, registration_document
from mesh.cli.bridge import agent_fields
from mesh.errors import ConfigError


def _write(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "reg.json"
    path.write_text(json.dumps(doc, ensure_ascii=False))
    return str(path)


def _args(**over: object) -> argparse.Namespace:
    base: dict[str, object] = {
        "agent_id": "cs.knowledge",
        "card": None,
        "registration": None,
        "capability": None,
        "example": [],
        "keyword": [],
        "tag": [],
        "name": None,
        "concurrency": 4,
        "input_schema": None,
        "output_schema": None,
    }
    return argparse.Namespace(**(base | over))


def test_a_python_agents_registration_round_trips_through_its_file(tmp_path: Path) -> None:
    path = _write(tmp_path, registration_document(knowledge.agent))
    fields = agent_fields(_args(registration=path))
    expected = knowledge.agent.registration("x")
    assert fields["capability_text"] == expected.capability_text
    assert fields["examples"] == expected.examples and fields["keywords"] == expected.keywords
    assert fields["tags"] == {"domain": "knowledge"}
    assert fields["name"] == "知识库 / Knowledge base"
    assert fields["input_schema"] == expected.input_schema
    assert fields["input_schema"]["additionalProperties"] is False


def test_flags_add_to_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, {"capability_text": "FAQ answers", "tags": {"domain": "kb"}})
    fields = agent_fields(_args(registration=path, tag=["tier=gold"], keyword=["faq"]))
    assert fields["tags"] == {"domain": "kb", "tier": "gold"}
    assert fields["keywords"] == ["faq"] and fields["capability_text"] == "FAQ answers"
    assert "input_schema" not in fields


@pytest.mark.parametrize(
    ("doc", "says"),
    [
        ({"capability_text": "x", "tagz": {}}, "unknown key(s) tagz"),
        ({"agent_id": "other", "capability_text": "x"}, "is agent 'other'"),
        (["not", "an", "object"], "not a JSON object"),
        ({"capability_text": "x", "keywords": [""]}, "keywords"),
    ],
)
def test_a_bad_registration_file_is_refused_naming_it(
    tmp_path: Path, doc: object, says: str
) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ConfigError, match="--registration") as err:
        load_registration(path, "cs.knowledge")
    assert says in str(err.value) and path in str(err.value)


def test_a_tag_without_equals_is_a_usage_error() -> None:
    from mesh.cli._args import UsageError

    with pytest.raises(UsageError, match="KEY=VALUE"):
        agent_fields(_args(capability="x", tag=["gold"]))
