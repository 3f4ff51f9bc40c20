"""Context references and the copy a router seeds under access control (no Redis)."""

from __future__ import annotations

import pytest

from mesh.dispatch.context import ContextRef, make_ref, parse_ref, seed_keys, split_ref
from mesh.errors import ContextNotFound
from mesh.keys import Keys
from mesh.schemas import TaskEnvelope

K = Keys("acme")


def test_a_reference_names_its_trace_version_and_under_access_control_its_agent() -> None:
    assert make_ref("t1", 3) == "ctx:t1:3"
    assert split_ref("ctx:t1:3") == ContextRef("t1", 3)
    # ids may hold ':' and '@', never '/': the agent after the first '/' is the whole rest
    ref = make_ref("a:b@c", 12, "team:x@y")
    assert ref == "ctx:a:b@c:12/team:x@y"
    assert split_ref(ref) == ContextRef("a:b@c", 12, "team:x@y")
    assert parse_ref(ref) == ("a:b@c", 12)
    assert K.for_agent("b").context("t1", 3, "a") == "acme:agent/b/:ctx:t1:3/a"
    assert K.context("t1", 3) == "acme:ctx:t1:3"  # without access control: as before


@pytest.mark.parametrize(
    "ref",
    [
        "",
        "t1:1",
        "ctx:t1",
        "ctx::1",
        "ctx:t1:x",
        "ctx:t1:²",
        "ctx:t1:1/",
        "ctx:t1:1/a/b",
        "ctx:t1:1/a b",
    ],
)
def test_a_malformed_reference_is_not_found(ref: str) -> None:
    with pytest.raises(ContextNotFound):
        split_ref(ref)


def test_a_router_copies_only_another_agents_context_of_the_tasks_own_trace() -> None:
    def task(context_ref: str | None, trace_id: str = "t1") -> TaskEnvelope:
        return TaskEnvelope(capability="c", trace_id=trace_id, context_ref=context_ref)

    assert seed_keys(K, task("ctx:t1:2/a"), "b") == [
        "acme:agent/a/:ctx:t1:2/a",  # where agent a's worker saved it
        "acme:agent/b/:ctx:t1:2/a",  # the copy agent b's worker reads
    ]
    for nothing in (
        task(None),
        task("ctx:t1:2/b"),  # b's own
        task("ctx:t1:2"),  # no agent's (the mesh's keys: no worker reads them)
        task("ctx:t2:2/a"),  # another trace's: b's worker must never see it
        task("ctx:t1:2/a/:idem:x"),  # not a reference: nothing else of a's view
    ):
        assert seed_keys(K, nothing, "b") == [], nothing.context_ref


def test_a_reference_of_the_longest_ids_fits_an_envelope() -> None:
    ref = make_ref("t" * 128, 10**18, "a" * 128)
    assert TaskEnvelope(capability="c", trace_id="t" * 128, context_ref=ref).context_ref == ref
