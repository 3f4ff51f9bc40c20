"""Clause splitting, intent detection and the merge of a compound request (pure)."""

from __future__ import annotations

import numpy as np

from mesh.router.clauses import split_clauses
from mesh.router.intents import find_intents
from mesh.router.merge import PARTIAL_FAILURE, merge_results
from mesh.router.scoring import Decision
from mesh.schemas import ErrorInfo, Result, TaskEnvelope

IDS = ("a", "b", "c")


def texts(text: str) -> list[str]:
    return [c.text for c in split_clauses(text)]


def test_clauses_split_at_punctuation_and_connectives() -> None:
    assert texts("How do I install it? Also I want to return it") == [
        "How do I install it",
        "I want to return it",
    ]
    assert texts("check my balance and also book a flight") == ["check my balance", "book a flight"]
    assert texts("帮我取消订单，还有查一下明天的天气") == ["帮我取消订单", "查一下明天的天气"]
    assert texts("订机票。另外，明天天气怎么样？") == ["订机票", "明天天气怎么样"]
    assert texts("book a table 顺便 call a taxi") == ["book a table", "call a taxi"]


def test_clauses_keep_single_requests_whole() -> None:
    assert texts("in french, how do i say, see you later") == [
        "in french, how do i say, see you later"
    ]
    assert texts("这个用不了我要退") == ["这个用不了我要退"]
    assert texts("version 1.2 of the app") == ["version 1.2 of the app"]
    assert texts("also, what time is it") == ["what time is it"]
    assert texts("") == [""]


def test_clause_spans_point_into_the_request() -> None:
    text = "where is my parcel? plus refund me"
    for c in split_clauses(text):
        assert text[c.start : c.end] == c.text


def decision(sims: tuple[float, float, float]) -> Decision:
    sim = np.array(sims, np.float32)
    zero = np.zeros(3, np.float32)
    code = np.where(sim >= 0.45, 0, 3).astype(np.int8)
    best = int(np.argmax(np.where(code == 0, sim, -np.inf))) if (code == 0).any() else None
    return Decision(
        IDS[best] if best is not None else None,
        "best" if best is not None else "none",
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
        code,
    )


def test_two_intents_that_score_better_apart_are_split() -> None:
    text = "where is my parcel? also refund me"
    clauses = split_clauses(text)
    split = find_intents(
        text,
        clauses,
        [decision((0.8, 0.1, 0.0)), decision((0.1, 0.7, 0.0))],
        decision((0.6, 0.5, 0.0)),
    )
    assert split is not None
    assert [(p.agent_id, p.text) for p in split.parts] == [
        ("a", "where is my parcel"),
        ("b", "refund me"),
    ]
    assert split.as_dict()["whole"]["agent_id"] == "a"


def test_one_intent_is_not_split() -> None:
    text = "what is 5 plus 3"
    clauses = split_clauses(text)
    # the fragment "3" is no intent: nothing to split
    low = find_intents(
        text, clauses, [decision((0.5, 0.0, 0.0)), decision((0.1, 0.2, 0.0))], decision((0.6, 0, 0))
    )
    assert low is None
    # same agent twice: one part
    same = find_intents(
        text, clauses, [decision((0.5, 0.0, 0.0)), decision((0.6, 0.0, 0.0))], decision((0.6, 0, 0))
    )
    assert same is None
    # the whole text explains the second part's agent better than the clause does
    whole = find_intents(
        text,
        clauses,
        [decision((0.6, 0.0, 0.0)), decision((0.0, 0.4, 0.0))],
        decision((0.7, 0.5, 0)),
    )
    assert whole is None


def test_a_clause_that_is_no_intent_joins_its_neighbour() -> None:
    text = "hi. where is my parcel? also refund me"
    clauses = split_clauses(text)
    each = [decision((0.1, 0.1, 0.1)), decision((0.8, 0.1, 0.0)), decision((0.1, 0.7, 0.0))]
    split = find_intents(text, clauses, each, decision((0.5, 0.4, 0.0)))
    assert split is not None
    assert [p.text for p in split.parts] == ["hi. where is my parcel", "refund me"]


def test_merge_keeps_the_order_and_names_failed_parts() -> None:
    parent = TaskEnvelope(capability="x also y")
    parts = [
        {"agent_id": "a", "text": "x", "task_id": "t.p1"},
        {"agent_id": "b", "text": "y", "task_id": "t.p2"},
    ]
    done = Result(task_id="t.p1", status="completed", output={"v": 1})
    merged = merge_results(parent, parts, [done, Result(task_id="t.p2", status="completed")])
    assert merged.status == "completed" and merged.error is None
    assert merged.task_id == parent.task_id and merged.trace_id == parent.trace_id
    assert merged.output is not None
    assert [p["agent_id"] for p in merged.output["parts"]] == ["a", "b"]
    assert merged.output["parts"][0]["output"] == {"v": 1}
    bad = Result(task_id="t.p2", status="rejected", error=ErrorInfo(code="rejected", message="no"))
    partial = merge_results(parent, parts, [done, bad])
    assert partial.status == "failed"
    assert partial.error is not None and partial.error.code == PARTIAL_FAILURE
    assert "part 2 (b): rejected" in partial.error.message
    assert partial.error.details == {"failed": [1], "completed": [0]}
    assert partial.output is not None and partial.output["partial"] is True
