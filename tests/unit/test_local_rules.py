"""Local rules (`mesh.local_rules`), the client's router watch cache, and their settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.errors import ConfigError
from mesh.local_rules import LocalRules
from mesh.router_watch import RouterQueue, RouterWatch


def test_the_first_matching_rule_names_the_agent_case_insensitively() -> None:
    rules = LocalRules.from_mapping(
        {"refund|退款": "support.refunds", "order": "sales", "REFUND": "other"}
    )
    assert rules.match("Please REFUND order 42") == "support.refunds"
    assert rules.match("我要退款") == "support.refunds"
    assert rules.match("where is my order") == "sales"
    assert rules.match("the weather") is None
    assert rules.targets == ("support.refunds", "sales", "other")
    assert rules and not LocalRules()


def test_the_file_format_skips_comments_and_splits_at_the_last_arrow() -> None:
    text = """
    # pattern -> agent_id
    refund|退款 -> support.refunds

    a->b -> arrows:in.pattern
    """
    rules = LocalRules.from_text(text)
    assert [(r.pattern.pattern, r.agent_id) for r in rules.rules] == [
        ("refund|退款", "support.refunds"),
        ("a->b", "arrows:in.pattern"),
    ]
    assert rules.match("x a->b y") == "arrows:in.pattern"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("refund support.refunds", "rules line 1: 'refund support.refunds' is not `pattern ->"),
        ("# ok\n -> support", "rules line 2: '-> support' is not `pattern -> agent_id`"),
        ("refund -> two words", "rules line 1: 'two words' is not an agent id"),
        ("refund( -> a", "rules line 1: pattern 'refund(' is not a regular expression"),
    ],
)
def test_a_bad_line_names_its_number(text: str, error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        LocalRules.from_text(text, source="rules")
    assert str(raised.value).startswith(error), raised.value


def test_a_bad_mapping_names_local_rules() -> None:
    with pytest.raises(ConfigError, match=r"^local_rules: 'a b' is not an agent id"):
        LocalRules.from_mapping({"x": "a b"})


def test_the_file_comes_from_mesh_local_rules(tmp_path: Path) -> None:
    path = tmp_path / "rules"
    path.write_text("invoice -> billing\n", encoding="utf-8")
    settings = Settings.from_env({"MESH_LOCAL_RULES": str(path)})
    assert settings.local_rules == path
    assert Settings.from_env({}).local_rules is None
    assert LocalRules.from_file(path).match("an invoice") == "billing"
    with pytest.raises(ConfigError, match=r"^MESH_LOCAL_RULES='.*missing' cannot be read"):
        LocalRules.from_file(tmp_path / "missing")


async def test_a_client_under_access_control_refuses_local_rules_naming_the_grant() -> None:
    settings = Settings(namespace="t", access_control=True)
    client = MeshClient(MeshConnection(settings), local_rules={"refund": "support.refunds"})
    with pytest.raises(ConfigError) as raised:
        await client.start()  # refused before any I/O
    assert str(raised.value) == (
        "local_rules cannot be followed under access control: a client's user may publish to "
        "t.ingress only, not to t.capabilities (keys agent.support.refunds.normal), and "
        "`mesh access provision` grants no more; unset local_rules"
    )


class ScriptedWatch(RouterWatch):
    """A watch whose broker answers come from a list (an exception: no answer)."""

    def __init__(self, answers: list[RouterQueue | Exception]) -> None:
        super().__init__(MeshConnection(Settings(namespace="t")), ttl_s=3.0, clock=self.now)
        self.answers = answers
        self.time = 0.0
        self.asked = 0

    def now(self) -> float:
        return self.time

    async def _read(self) -> RouterQueue:
        self.asked += 1
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


async def test_a_router_count_is_trusted_for_its_ttl_and_zero_never() -> None:
    watch = ScriptedWatch(
        [RouterQueue(1, 0), RouterQueue(0, 3), RouterQueue(0, 3), ConnectionError("away")]
    )
    assert await watch.routers() == 1
    watch.time = 2.9
    assert await watch.routers() == 1 and watch.asked == 1  # from the cache
    watch.time = 3.0
    assert await watch.routers() == 0 and watch.asked == 2
    assert await watch.routers() == 0 and watch.asked == 3  # zero is asked again
    assert await watch.routers() is None  # no answer is unknown, not zero


async def test_waiting_requests_share_one_recent_answer_whatever_it_said() -> None:
    watch = ScriptedWatch([RouterQueue(0, 5), RouterQueue(0, 6)])
    assert await watch.read(max_age_s=0.75) == RouterQueue(0, 5)
    watch.time = 0.7
    assert await watch.read(max_age_s=0.75) == RouterQueue(0, 5) and watch.asked == 1
    watch.time = 0.75
    assert await watch.read(max_age_s=0.75) == RouterQueue(0, 6) and watch.asked == 2


class TickingWatch(ScriptedWatch):
    """A scripted watch whose clock moves on by `step` with every question it asks."""

    def __init__(self, answers: list[RouterQueue | Exception], step: float = 0.25) -> None:
        super().__init__(answers)
        self.confirm_s, self.recheck_s = 1.0, 0.0
        self.step = step

    async def _read(self) -> RouterQueue:
        self.time += self.step
        return await super()._read()


async def test_no_router_is_believed_once_zero_held_for_the_confirm_time() -> None:
    watch = TickingWatch([RouterQueue(0, 0)] * 6)
    assert await watch.absent() is True
    assert watch.asked == 5  # zero at 0.25, 0.5, 0.75, 1.0, 1.25: held for 1.0 s
    assert await watch.absent() is True and watch.asked == 6  # confirmed: one more look


async def test_a_router_back_within_the_confirm_time_is_not_absent() -> None:
    # a router failing over to another node: uncounted for two looks, then back
    watch = TickingWatch([RouterQueue(0, 2), RouterQueue(0, 3), RouterQueue(1, 0)])
    assert await watch.absent() is False and watch.asked == 3


async def test_no_answer_is_not_absent_and_restarts_the_confirmation() -> None:
    watch = TickingWatch([RouterQueue(0, 0), RouterQueue(0, 0), ConnectionError("away")])
    assert await watch.absent() is False and watch.asked == 3
    watch.answers = [RouterQueue(0, 0)] * 5
    assert await watch.absent() is True and watch.asked == 8  # counted again from zero
