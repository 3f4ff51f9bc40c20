"""The task state machine as data: properties over random event sequences."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from mesh.dispatch.states import NEW, STATES, TERMINAL, TRANSITIONS, allowed, lua_table, walk

EVENTS = st.lists(st.sampled_from(STATES), max_size=30)


def test_every_state_has_a_row_and_terminal_states_have_no_exit() -> None:
    assert set(TRANSITIONS) == {NEW, *STATES}
    for state in TERMINAL:
        assert not TRANSITIONS[state]
    for state in set(STATES) - TERMINAL:
        assert TRANSITIONS[state], f"{state} is a dead end but not terminal"


def test_every_non_terminal_state_can_still_end() -> None:
    for start in set(STATES) - TERMINAL:
        seen, frontier = {start}, [start]
        while frontier:
            for nxt in TRANSITIONS[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert seen & TERMINAL, f"nothing terminal is reachable from {start}"


def test_the_happy_path_and_its_detours() -> None:
    happy = ["submitted", "routing", "dispatched", "accepted", "processing", "completed"]
    assert walk(NEW, happy) == "completed"
    assert walk(NEW, [*happy[:3], "rerouting", "routing", "dispatched"]) == "dispatched"
    assert walk("processing", ["retrying", "accepted", "processing", "failed"]) == "failed"
    assert walk(NEW, ["accepted", "processing"]) == "processing"  # straight to an agent queue
    assert walk("completed", ["processing"]) is None
    assert walk(NEW, ["processing"]) is None
    assert walk("rerouting", ["rerouting", "routing"]) == "routing"  # first step already there


@given(EVENTS)
def test_a_random_event_sequence_applies_only_legal_steps(events: list[str]) -> None:
    state = NEW
    history = [state]
    for event in events:
        nxt = walk(state, [event])
        if allowed(state, event):
            assert nxt == event
            state = event
            history.append(state)
        elif event == state:
            assert nxt == state  # a repeat of the current state is a no-op
        else:
            assert nxt is None  # refused; the state stays
    for a, b in itertools.pairwise(history):
        assert b in TRANSITIONS[a]
    if any(s in TERMINAL for s in history):
        assert history[-1] in TERMINAL and sum(s in TERMINAL for s in history) == 1


@given(EVENTS)
def test_a_path_is_all_or_nothing(events: list[str]) -> None:
    end = walk(NEW, events)
    state: str | None = NEW
    for i, event in enumerate(events):
        assert state is not None
        state = state if i == 0 and event == state else (event if allowed(state, event) else None)
        if state is None:
            break
    assert end == state


def test_lua_table_lists_every_edge() -> None:
    table = lua_table()
    for src, targets in TRANSITIONS.items():
        for to in targets:
            assert f'["{to}"]=true' in table
        assert f'["{src}"]=' in table
