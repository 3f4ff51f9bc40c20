"""`MESH_PRIORITY_WEIGHTS`: the bands' weights, validated with a message naming the fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.topology import Topology


def test_the_default_is_five_three_one_for_routers_and_agents() -> None:
    topology = Topology.from_settings(Settings())
    assert Settings().priority_weights == (5, 3, 1)
    assert [w for _, w in topology.router_queues()] == [5, 3, 1]
    assert [w for _, w in topology.agent_queues("a")] == [5, 3, 1]


@pytest.mark.parametrize("raw", ["8,2,1", "8:2:1", " 8, 2 ,1 "])
def test_weights_come_from_the_environment(raw: str) -> None:
    settings = Settings.from_env({"MESH_PRIORITY_WEIGHTS": raw})
    assert settings.priority_weights == (8, 2, 1)
    topology = Topology.from_settings(settings)
    assert topology.agent_queues("a") == [
        ("mesh.agent.a.high", 8),
        ("mesh.agent.a.normal", 2),
        ("mesh.agent.a.low", 1),
    ]
    assert [w for _, w in topology.router_queues()] == [8, 2, 1]


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ("5,3", "2 weight(s) given; expected three whole numbers high,normal,low, e.g. 5,3,1"),
        ("5,3,1,1", "4 weight(s) given"),
        ("5,3,0", "weight 0 is outside 1..100 (a band of weight 0 would starve)"),
        ("5,x,1", "weight 'x' is not a whole number"),
        ("5,1.5,1", "weight '1.5' is not a whole number"),
        ("500,3,1", "weight 500 is outside 1..100"),
    ],
)
def test_bad_weights_name_the_setting_and_the_form(raw: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Settings.from_env({"MESH_PRIORITY_WEIGHTS": raw})
    message = str(raised.value)
    assert message.startswith(f"MESH_PRIORITY_WEIGHTS={raw!r}: ")
    assert problem in message


def test_settings_built_in_code_are_checked_too() -> None:
    assert Settings(priority_weights=(2, 2, 1)).priority_weights == (2, 2, 1)
    with pytest.raises(ValidationError, match="weight 0 is outside"):
        Settings(priority_weights=(0, 1, 1))
