"""Each default is written once: `Settings` holds it, and `ScoreWeights`, the observer's
`Thresholds` and `Topology` read theirs from it (a second literal copy fails here)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from typing import Any

import pytest

from mesh.config import Settings
from mesh.observer import alerts
from mesh.observer.alerts import Thresholds
from mesh.router import scoring
from mesh.router.scoring import ScoreWeights
from mesh.topology import Topology

#: (class, its field -> the Settings field it mirrors)
MIRRORS: list[tuple[type[Any], dict[str, str]]] = [
    (ScoreWeights, {f: f for f in scoring.SETTINGS_FIELDS}),
    (Thresholds, {f: alerts.SETTINGS_PREFIX + f for f in alerts.SETTINGS_FIELDS}),
    (
        Topology,
        {
            "namespace": "namespace",
            "queue_type": "queue_type",
            "delivery_limit": "delivery_limit",
            "retry_delays_ms": "retry_delays_ms",
            "dead_letter_max_length": "dead_letter_max_length",
            "dead_letter_ttl_s": "dead_letter_ttl_s",
            "mode": "topology",
        },
    ),
]
IDS = [cls.__name__ for cls, _ in MIRRORS]


@pytest.mark.parametrize(("cls", "mapping"), MIRRORS, ids=IDS)
def test_defaults_equal_the_settings_defaults(cls: type[Any], mapping: dict[str, str]) -> None:
    settings = Settings()
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for name, setting in mapping.items():
        assert setting in Settings.model_fields, setting
        assert defaults[name] == getattr(settings, setting), name


@pytest.mark.parametrize(("cls", "mapping"), MIRRORS, ids=IDS)
def test_no_second_literal_copy_of_a_default(cls: type[Any], mapping: dict[str, str]) -> None:
    """The class body reads each mirrored default from `Settings` (``_setting(...)``)."""
    (node,) = ast.parse(inspect.getsource(cls)).body
    assert isinstance(node, ast.ClassDef)
    written = {
        stmt.target.id: stmt.value
        for stmt in node.body
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
    }
    copies = [name for name in mapping if not _reads_setting(written[name])]
    assert not copies, f"{cls.__name__} writes its own default for {copies}"


def _reads_setting(value: ast.expr | None) -> bool:
    return (
        isinstance(value, ast.Call)
        and isinstance(value.func, ast.Name)
        and value.func.id == "_setting"
    )


@pytest.mark.parametrize(("cls", "mapping"), MIRRORS[:2], ids=IDS[:2])
def test_from_settings_reads_every_mirrored_field(cls: type[Any], mapping: dict[str, str]) -> None:
    """Changed settings reach every mirrored field (`from_settings` skips none)."""
    changed: dict[str, Any] = {}
    for setting in mapping.values():
        value = Settings.model_fields[setting].default
        changed[setting] = value + 1 if isinstance(value, int) else value / 2
    settings = Settings(**changed)
    built = (
        cls.from_settings(settings, threshold=0.5)
        if cls is ScoreWeights
        else cls.from_settings(settings)
    )
    for name, setting in mapping.items():
        assert getattr(built, name) == changed[setting], name
