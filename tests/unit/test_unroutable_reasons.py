"""Every unroutable says why: one code and one sentence per cause (`mesh.router.reasons`),
and `miss_of` finds the cause of a decision that chose nobody."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pytest
from numpy.typing import NDArray

from mesh.cli.explain import outcome
from mesh.config import Settings
from mesh.router.misses import miss_of
from mesh.router.reasons import (
    CODES,
    NoMatch,
    agents_excluded,
    below_threshold,
    no_agents,
    no_fallback,
    no_live_instance,
    no_selector,
    queued_for_human,
    tags_excluded,
    target_excluded,
    unknown_target,
    unmatched,
)
from mesh.router.scoring import Decision
from mesh.schemas import TaskEnvelope

BELOW = NoMatch("below_threshold", threshold=0.45, best_agent="refunds", best_score=0.312)


def test_below_threshold_names_the_best_score_the_threshold_and_the_fallback() -> None:
    miss = NoMatch(
        "below_threshold",
        threshold=0.45,
        best_agent="refunds",
        best_score=0.312,
        fallback="helpdesk",
        fallback_why="has no live instance",
    )
    ending = below_threshold(miss)
    assert ending.status == "unroutable" and ending.code == "below_threshold"
    assert ending.message == (
        "the best score, 0.312 (refunds), is below the threshold 0.450, and the fallback "
        "agent helpdesk has no live instance"
    )
    assert ending.details == {
        "best_agent": "refunds",
        "best_score": 0.312,
        "threshold": 0.45,
        "fallback_agent": "helpdesk",
    }


def test_no_fallback_names_both_settings() -> None:
    ending = no_fallback(BELOW)
    assert ending.code == "no_fallback" and ending.reason == "unroutable"
    assert "0.312 (refunds)" in ending.message and "0.450" in ending.message
    assert "MESH_FALLBACK_AGENT" in ending.message and "MESH_HUMAN_QUEUE" in ending.message


def test_queued_for_human_is_no_dead_letter_and_names_the_queue() -> None:
    ending = queued_for_human(BELOW, "mesh.human")
    assert ending.status == "queued_for_human" and ending.reason is None
    assert ending.code == "below_threshold"
    assert "mesh.human" in ending.message and "0.312" in ending.message
    assert ending.details is not None and ending.details["queue"] == "mesh.human"


def test_tags_excluded_names_the_tags_that_did_it() -> None:
    miss = NoMatch("tags", best_agent="refunds", tags={"region": "eu"})
    ending = tags_excluded(miss, {"region": "eu", "tier": "gold"})
    assert ending.code == "tags_excluded"
    assert ending.message == (
        "the required tags region=eu exclude every agent that could take the task "
        "(the best without them: refunds)"
    )
    assert ending.details == {
        "required_tags": {"region": "eu", "tier": "gold"},
        "excluding_tags": {"region": "eu"},
    }


def test_target_reasons() -> None:
    unknown = unknown_target("nobody-home")
    assert unknown.code == "unknown_target"
    assert unknown.message.startswith("the target 'nobody-home' is no agent of this mesh")
    gave_back = target_excluded("picky")
    assert gave_back.code == "target_excluded" and "'picky' gave the task back" in gave_back.message


def test_no_live_instance_says_since_when() -> None:
    at = 1_700_000_100_000
    ending = no_live_instance(("refunds", "billing"), at - 42_000, at)
    assert ending.code == "no_live_instance"
    assert ending.message == (
        "agent 'refunds' matches the task but has no live instance (nor do billing): its "
        "last lease ended 42 s ago (2023-11-14 22:14:18 UTC)"
    )
    never = no_live_instance(("refunds",), None, at)
    assert never.message.endswith("no live instance of it was ever seen")


def test_the_other_reasons_have_their_own_codes() -> None:
    assert agents_excluded(("a1", "a2")).code == "agents_excluded"
    assert "(a1, a2)" in agents_excluded(("a1", "a2")).message
    assert no_agents().code == "no_agents"
    assert no_selector().code == "no_selector"
    endings = [
        below_threshold(BELOW),
        no_fallback(BELOW),
        tags_excluded(NoMatch("tags"), {"k": "v"}),
        unknown_target("x"),
        target_excluded("x"),
        no_live_instance(("x",), None, 0),
        agents_excluded(("x",)),
        no_agents(),
        no_selector(),
    ]
    codes = [e.code for e in endings]
    assert len(set(codes)) == len(codes)
    assert set(codes) <= set(CODES)
    # one sentence each: no line breaks, no second full stop
    assert all("\n" not in e.message and ". " not in e.message for e in endings)


@pytest.mark.parametrize(
    ("fallback", "human", "code", "status"),
    [
        ("helpdesk", "mesh.human", "below_threshold", "unroutable"),
        (None, "mesh.human", "below_threshold", "queued_for_human"),
        (None, None, "no_fallback", "unroutable"),
    ],
)
def test_unmatched_below_the_threshold_follows_the_settings(
    fallback: str | None, human: str | None, code: str, status: str
) -> None:
    miss = NoMatch("below_threshold", threshold=0.45, best_agent="a", best_score=0.2)
    if fallback:
        miss = NoMatch(
            "below_threshold",
            threshold=0.45,
            best_agent="a",
            best_score=0.2,
            fallback=fallback,
            fallback_why="has no live instance",
        )
    ending = unmatched(TaskEnvelope(capability="x"), miss, human_queue=human)
    assert (ending.code, ending.status) == (code, status)


def test_unmatched_without_a_cause_is_no_agent() -> None:
    envelope = TaskEnvelope(capability="x", excluded_agents=["a1"])
    ending = unmatched(envelope, None, human_queue="mesh.human")
    assert ending.code == "no_agent" and "a1" in ending.message


# --- miss_of -------------------------------------------------------------------------------
IDS = ("refunds", "logistics", "billing")
TAGS = {"refunds": {"region": "eu"}, "logistics": {"region": "us"}, "billing": {"region": "us"}}


def _decision(similarity: list[float], filter_code: list[int]) -> Decision:
    sim = np.array(similarity, np.float32)
    zero = np.zeros(len(IDS), np.float32)
    return Decision(
        None,
        "none",
        0.45,
        IDS,
        sim,
        sim,
        zero,
        zero,
        zero,
        zero,
        zero,
        sim,
        np.array(filter_code, np.int8),
    )


def _mask(required: Mapping[str, str]) -> NDArray[np.bool_]:
    return np.array([all(TAGS[a].get(k) == v for k, v in required.items()) for a in IDS], np.bool_)


def _miss(decision: Decision, tags: dict[str, str] | None = None, **kw: object) -> NoMatch:
    args: dict[str, object] = {
        "excluded": (),
        "breaker_open": (),
        "last_live_ms": lambda a: 1_000 if a == "refunds" else None,
    }
    args.update(kw)
    return miss_of(decision, required_tags=tags or {}, tag_mask=_mask, **args)  # type: ignore[arg-type]


def test_miss_below_threshold_reports_the_best_score() -> None:
    miss = _miss(_decision([0.30, 0.20, 0.10], [3, 3, 3]))
    assert (miss.cause, miss.best_agent, miss.threshold) == ("below_threshold", "refunds", 0.45)
    assert miss.best_score == pytest.approx(0.30)


def test_miss_of_an_unavailable_match_says_which_way() -> None:
    decision = _decision([0.80, 0.20, 0.10], [1, 3, 3])
    down = _miss(decision)
    assert (down.cause, down.agents, down.last_live_ms) == ("no_live_instance", ("refunds",), 1_000)
    assert _miss(decision, excluded=("refunds",)).cause == "excluded"
    assert _miss(decision, breaker_open=("refunds",)).cause == "breaker_open"


def test_miss_by_tags_names_the_tags() -> None:
    # refunds clears the threshold but is in region eu
    miss = _miss(_decision([0.80, 0.20, 0.10], [2, 3, 3]), {"region": "us"})
    assert (miss.cause, miss.tags, miss.best_agent) == ("tags", {"region": "us"}, "refunds")
    # nobody has region=asia at all
    nobody = _miss(_decision([0.30, 0.20, 0.10], [2, 2, 2]), {"region": "asia"})
    assert (nobody.cause, nobody.tags) == ("tags", {"region": "asia"})
    # the tags leave agents, just none above the threshold: the threshold is why
    low = _miss(_decision([0.80, 0.20, 0.10], [2, 3, 3]), {"region": "us"}, excluded=())
    assert low.cause == "tags"
    below = _miss(_decision([0.30, 0.20, 0.10], [2, 3, 3]), {"region": "us"})
    assert (below.cause, below.best_agent) == ("below_threshold", "logistics")


def test_miss_of_an_empty_index() -> None:
    empty = Decision(
        None,
        "none",
        0.45,
        (),
        *[np.zeros(0, np.float32)] * 8,
        np.zeros(0, np.int8),
    )
    assert _miss(empty).cause == "no_agents"


# --- mesh explain says what the current settings do ----------------------------------------
def test_explain_never_promises_a_fallback_that_is_not_configured() -> None:
    human = outcome("haiku", {}, [], BELOW, [], Settings())
    assert "fallback" not in human and "waits for a person in mesh.human" in human
    off = outcome("haiku", {}, [], BELOW, [], Settings(human_queue=False))
    assert off.startswith("unroutable [no_fallback]")
    fallback = NoMatch(
        "below_threshold",
        threshold=0.45,
        best_agent="refunds",
        best_score=0.3,
        fallback="helpdesk",
        fallback_why="could take it",
    )
    taken = outcome("haiku", {}, [], fallback, ["quotes"], Settings(fallback_agent="helpdesk"))
    assert taken == (
        "the router calls for bids from quotes; if none wins, the fallback agent helpdesk "
        "takes it (MESH_FALLBACK_AGENT)"
    )
    assert outcome("haiku", {}, [], None, [], Settings()) == ""
    tags = outcome(
        "x", {"region": "us"}, [], NoMatch("tags", tags={"region": "us"}), [], Settings()
    )
    assert tags.startswith("unroutable [tags_excluded]: the required tags region=us")
