"""`EventBatcher` (events of one routing key travel together) and `events_of` /
`each_event`, the one reader of both shapes on the events exchange."""

from __future__ import annotations

import ast
import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from mesh.config import Settings
from mesh.event_batch import EventBatcher
from mesh.schemas import Event, EventBatch, InvalidEnvelope, batch_body, decode, encode
from mesh.schemas.event import MAX_BATCH_EVENTS
from mesh.topology import BATCH_HEADER, batched_event
from mesh.wire import each_event, events_of, is_batch
from tests.conftest import wait_until

MESH = Path(__file__).resolve().parents[2] / "mesh"


class Sent:
    """Records what a batcher sends: (routing key, bodies) per message."""

    def __init__(self, fail: set[str] | None = None) -> None:
        self.messages: list[tuple[str, list[bytes]]] = []
        self.fail = fail or set()

    async def __call__(self, key: str, bodies: Sequence[bytes]) -> None:
        if key in self.fail:
            raise ConnectionError(f"no broker for {key}")
        self.messages.append((key, list(bodies)))


def ev(n: int, type_: str = "task.completed") -> bytes:
    return encode(Event(type=type_, task_id=f"t{n}", ts_ms=1_000 + n))


class FakeMessage:
    """What `events_of` reads of a delivery."""

    def __init__(self, body: bytes, headers: dict[str, Any] | None = None) -> None:
        self.body = body
        self.headers = headers or {}
        self.routing_key = "task.completed"
        self.user_id = "guest"


async def test_events_of_a_window_go_as_one_message_per_key_in_first_event_order() -> None:
    sent = Sent()
    batcher = EventBatcher(sent, window_s=0.05, max_events=100)
    await batcher.add("task.completed.r1", ev(1))
    await batcher.add("route.decision", ev(2, "route.decision"))
    await batcher.add("task.completed.r1", ev(3))
    assert sent.messages == [] and batcher.pending == 3  # the window is open
    await wait_until(lambda: len(sent.messages) == 2, timeout=5)
    assert sent.messages == [
        ("task.completed.r1", [ev(1), ev(3)]),
        ("route.decision", [ev(2, "route.decision")]),
    ]
    assert (batcher.messages, batcher.events, batcher.pending) == (2, 3, 0)
    # the next event opens a new window
    await batcher.add("task.completed.r1", ev(4))
    await wait_until(lambda: len(sent.messages) == 3, timeout=5)
    assert sent.messages[-1] == ("task.completed.r1", [ev(4)])


async def test_a_full_batch_goes_at_once_and_the_rest_waits_for_the_window() -> None:
    sent = Sent()
    batcher = EventBatcher(sent, window_s=60.0, max_events=3)
    await batcher.add("a", ev(0))
    for n in range(1, 3):
        await batcher.add("b", ev(n))
    assert sent.messages == []
    await batcher.add("b", ev(3))  # the third of b: sent before add returns
    assert sent.messages == [("b", [ev(1), ev(2), ev(3)])]
    assert batcher.pending == 1  # a's still waits (a 60 s window)
    await batcher.flush()
    assert sent.messages[-1] == ("a", [ev(0)]) and batcher.pending == 0


async def test_an_event_that_would_pass_the_byte_cap_starts_the_next_batch() -> None:
    sent = Sent()
    size = len(ev(1))
    batcher = EventBatcher(sent, window_s=60.0, max_events=100, max_bytes=2 * size + 2)
    for n in range(1, 4):
        await batcher.add("k", ev(n))
    assert sent.messages == [("k", [ev(1), ev(2)])]
    await batcher.flush()
    assert sent.messages == [("k", [ev(1), ev(2)]), ("k", [ev(3)])]


async def test_flush_sends_what_waits_and_waits_for_a_window_under_way() -> None:
    release = asyncio.Event()
    sent: list[tuple[str, list[bytes]]] = []

    async def slow(key: str, bodies: Sequence[bytes]) -> None:
        await release.wait()
        sent.append((key, list(bodies)))

    batcher = EventBatcher(slow, window_s=0.01, max_events=100)
    await batcher.add("a", ev(1))
    await wait_until(lambda: batcher.pending == 0, timeout=5)  # the window's send started
    await batcher.add("b", ev(2))
    flushing = asyncio.create_task(batcher.flush())
    await wait_until(lambda: flushing.done() is False and batcher.pending == 0, timeout=5)
    assert not flushing.done()
    release.set()
    await asyncio.wait_for(flushing, 5)
    assert sorted(sent) == [("a", [ev(1)]), ("b", [ev(2)])]


async def test_no_window_sends_every_event_at_once() -> None:
    for window_s, max_events in ((0.0, 100), (0.05, 1)):
        sent = Sent()
        batcher = EventBatcher(sent, window_s=window_s, max_events=max_events)
        assert not batcher.enabled
        await batcher.add("k", ev(1))
        await batcher.add("k", ev(2))
        assert sent.messages == [("k", [ev(1)]), ("k", [ev(2)])]


async def test_a_failed_send_of_the_window_is_told_and_the_other_keys_still_go() -> None:
    lost: list[tuple[str, int]] = []
    sent = Sent(fail={"bad"})
    batcher = EventBatcher(
        sent, window_s=0.01, max_events=100, on_lost=lambda k, n, exc: lost.append((k, n))
    )
    await batcher.add("bad", ev(1))
    await batcher.add("bad", ev(2))
    await batcher.add("good", ev(3))
    await wait_until(lambda: sent.messages and lost, timeout=5)
    assert lost == [("bad", 2)] and sent.messages == [("good", [ev(3)])]


async def test_a_full_batch_that_fails_raises_to_the_emitter() -> None:
    batcher = EventBatcher(Sent(fail={"k"}), window_s=60.0, max_events=2)
    await batcher.add("k", ev(1))
    with pytest.raises(ConnectionError):
        await batcher.add("k", ev(2))
    assert batcher.pending == 0


async def test_discard_drops_what_waits() -> None:
    sent = Sent()
    batcher = EventBatcher(sent, window_s=0.01, max_events=100)
    await batcher.add("a", ev(1))
    await batcher.add("b", ev(2))
    assert batcher.discard() == 2 and batcher.pending == 0
    await batcher.flush()
    assert sent.messages == []


# --- the wire shape --------------------------------------------------------------------------
def test_a_batch_body_is_an_event_batch_of_the_events_as_encoded() -> None:
    events = [Event(type="task.completed", task_id=f"t{n}", data={"n": n}) for n in range(3)]
    body = batch_body([encode(e) for e in events])
    assert decode(EventBatch, body).events == events
    with pytest.raises(InvalidEnvelope):
        decode(Event, body)  # a distinct shape: never taken for one event


def test_events_of_reads_one_event_and_a_batch() -> None:
    one = Event(type="task.failed", task_id="t1")
    two = [Event(type="task.completed", task_id="a"), Event(type="task.completed", task_id="b")]
    single = FakeMessage(encode(one))
    batch = FakeMessage(batch_body([encode(e) for e in two]), {BATCH_HEADER: 2})
    assert events_of(single) == [one] and not is_batch(single)  # type: ignore[arg-type]
    assert events_of(batch) == two and is_batch(batch)  # type: ignore[arg-type]
    for bad in (
        FakeMessage(b"{}", {BATCH_HEADER: 1}),
        FakeMessage(b'{"events":[]}', {BATCH_HEADER: 0}),
        FakeMessage(b'{"events":[{"type":"nonsense"}]}', {BATCH_HEADER: 1}),
        FakeMessage(b"not json"),
    ):
        with pytest.raises(InvalidEnvelope):
            events_of(bad)  # type: ignore[arg-type]


async def test_each_event_hands_over_every_event_of_a_delivery_in_order() -> None:
    seen: list[tuple[str | None, str]] = []
    unreadable: list[str] = []

    async def handle(event: Event, message: Any) -> None:
        seen.append((event.task_id, message.routing_key))

    handler = each_event(handle, unreadable=lambda m, exc: unreadable.append(exc.kind))
    events = [encode(Event(type="task.completed", task_id=f"t{n}")) for n in range(3)]
    await handler(FakeMessage(batch_body(events), {BATCH_HEADER: 3}))  # type: ignore[arg-type]
    await handler(FakeMessage(encode(Event(type="task.failed", task_id="x"))))  # type: ignore[arg-type]
    await handler(FakeMessage(b"[1, 2]", {BATCH_HEADER: 2}))  # type: ignore[arg-type]
    assert seen == [(task, "task.completed") for task in ("t0", "t1", "t2", "x")]
    assert unreadable == ["EventBatch"]


def test_only_per_task_events_wait() -> None:
    assert batched_event("task.completed") and batched_event("task.retrying")
    assert batched_event("route.decision")
    for prompt in ("agent.up", "agent.down", "alert.breaker_open", "route.counts"):
        assert not batched_event(prompt)
    for kept in ("route.learned", "route.fitted", "route.feedback"):
        assert not batched_event(kept)


def test_the_settings_bound_is_the_schemas() -> None:
    field = Settings.model_fields["event_batch_max_events"]
    assert any(getattr(m, "le", None) == MAX_BATCH_EVENTS for m in field.metadata)


def test_no_event_is_decoded_outside_the_one_reader() -> None:
    """A delivery of the events exchange is read by `mesh.wire.events_of` alone (the
    observer's store decodes events it stored, one by one)."""
    allowed = {"mesh/wire/consume.py", "mesh/observer/store.py"}
    found = []
    for path in sorted(MESH.rglob("*.py")):
        rel = path.relative_to(MESH.parent).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            decodes = (
                isinstance(func, ast.Name)
                and func.id == "decode"
                and node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in ("Event", "EventBatch")
            )
            validates = (
                isinstance(func, ast.Attribute)
                and func.attr.startswith("model_validate")
                and isinstance(func.value, ast.Name)
                and func.value.id == "Event"
            )
            if (decodes or validates) and rel not in allowed:
                found.append(f"{rel}:{node.lineno}")
    assert found == []
