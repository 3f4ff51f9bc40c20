"""The task state machine of docs/design.md section 7, as plain data.

`TRANSITIONS` is the one table: the Lua scripts of `mesh.dispatch.lua` are generated from
it, and the property test checks the scripts against `walk()`. A task starts at
``submitted`` (through a router) or at ``accepted`` (an envelope published straight to an
agent queue); terminal states have no way out.

=============  ====================================================================
from           to
=============  ====================================================================
(new)          submitted, accepted
submitted      routing, expired, unroutable, dead, failed
routing        dispatched, unroutable, expired, dead, failed, queued_for_human
dispatched     accepted, rerouting, expired, dead, failed
rerouting      routing, expired, unroutable, dead, failed
accepted       processing, expired, rerouting, failed
processing     completed, failed, expired, retrying, rerouting, rejected, dead,
               accepted (redelivered after a crash: the claim is taken over)
retrying       accepted, expired, failed, dead
queued_for_    completed, failed (a person answered, `mesh human answer`)
human
(terminal)     completed, failed, expired, unroutable, dead, rejected: none
=============  ====================================================================
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, Literal, get_args

TaskState = Literal[
    "submitted",
    "routing",
    "dispatched",
    "rerouting",
    "accepted",
    "processing",
    "retrying",
    "queued_for_human",
    "completed",
    "failed",
    "expired",
    "unroutable",
    "dead",
    "rejected",
]
STATES: Final[tuple[TaskState, ...]] = get_args(TaskState)
#: the pseudo-state of a task that has no record yet
NEW: Final = ""

TERMINAL: Final[frozenset[str]] = frozenset(
    {"completed", "failed", "expired", "unroutable", "dead", "rejected"}
)

TRANSITIONS: Final[Mapping[str, frozenset[str]]] = {
    NEW: frozenset({"submitted", "accepted"}),
    "submitted": frozenset({"routing", "expired", "unroutable", "dead", "failed"}),
    "routing": frozenset(
        {"dispatched", "unroutable", "expired", "dead", "failed", "queued_for_human"}
    ),
    "dispatched": frozenset({"accepted", "rerouting", "expired", "dead", "failed"}),
    "rerouting": frozenset({"routing", "expired", "unroutable", "dead", "failed"}),
    "accepted": frozenset({"processing", "expired", "rerouting", "failed"}),
    "processing": frozenset(
        {"completed", "failed", "expired", "retrying", "rerouting", "rejected", "dead", "accepted"}
    ),
    "retrying": frozenset({"accepted", "expired", "failed", "dead"}),
    #: handed to a person (degradation level 2): only their answer ends it
    "queued_for_human": frozenset({"completed", "failed"}),
    **{state: frozenset() for state in TERMINAL},
}


def allowed(current: str, to: str) -> bool:
    """True when a task in `current` (``""`` for none yet) may move to `to`."""
    return to in TRANSITIONS.get(current, frozenset())


def walk(current: str, path: Iterable[str]) -> str | None:
    """The state after following `path` from `current`, or None if a step is illegal.

    A path whose first step is the current state skips that step (so "make sure it is
    rerouting, then route it" is one path whoever set ``rerouting`` first). The scripts
    apply a path all or nothing with the same rule.
    """
    state = current
    for i, to in enumerate(path):
        if i == 0 and to == state:
            continue
        if not allowed(state, to):
            return None
        state = to
    return state


def lua_table() -> str:
    """`TRANSITIONS` as a Lua table literal (``ALLOWED[from][to] == true``)."""
    rows = []
    for src in sorted(TRANSITIONS):
        targets = ", ".join(f"[{_lua_str(t)}]=true" for t in sorted(TRANSITIONS[src]))
        rows.append(f"  [{_lua_str(src)}]={{{targets}}}")
    return "{\n" + ",\n".join(rows) + "\n}"


def _lua_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


__all__ = ["NEW", "STATES", "TERMINAL", "TRANSITIONS", "TaskState", "allowed", "lua_table", "walk"]
