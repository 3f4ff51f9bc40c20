"""`BeatBatcher`: which beats travel together, when the next is due, what a stop takes out
(the wire itself: tests/integration/test_registry.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import aio_pika
import pytest

from mesh.registry import protocol
from mesh.registry.beats import BeatBatcher, gather_window_s
from mesh.schemas import Heartbeat, HeartbeatBatch, now_ms
from mesh.schemas.codec import loads


class Exchange:
    """Records what is published through it (a stand-in for the registry exchange)."""

    def __init__(self, fail: BaseException | None = None) -> None:
        self.sent: list[aio_pika.Message] = []
        self.fail = fail

    async def publish(self, message: aio_pika.Message, **_: Any) -> None:
        if self.fail is not None:
            raise self.fail
        self.sent.append(message)


def beat(i: int) -> Heartbeat:
    return Heartbeat(agent_id="a", instance_id=f"a-{i}", token=i + 1, sent_ms=now_ms())


def batcher(window_s: float = 0.05, interval_s: float = 1.0) -> BeatBatcher:
    return BeatBatcher(window_s=window_s, interval_s=interval_s, login="worker.a", key="k")


def test_the_window_is_a_twentieth_of_the_interval_and_at_most_a_quarter_second() -> None:
    assert gather_window_s(0.5) == pytest.approx(0.025)
    assert gather_window_s(5.0) == 0.25
    assert gather_window_s(60.0) == 0.25


async def test_beats_of_one_window_go_as_one_batch_naming_each_reply_queue() -> None:
    b, ex = batcher(), Exchange()
    dues = await asyncio.gather(*(b.send(ex, beat(i), f"q{i}") for i in range(3)))  # type: ignore[arg-type]
    assert len(ex.sent) == 1 and ex.sent[0].type == protocol.HEARTBEATS
    assert ex.sent[0].user_id == "worker.a"
    batch = HeartbeatBatch.model_validate_json(ex.sent[0].body)
    assert [(x.instance_id, x.reply_to) for x in batch.beats] == [
        ("a-0", "q0"),
        ("a-1", "q1"),
        ("a-2", "q2"),
    ]
    assert len(set(dues)) == 1  # all due at the same slot
    assert b.messages == 1 and b.beats == 3


async def test_a_beat_alone_goes_as_a_plain_heartbeat() -> None:
    b, ex = batcher(), Exchange()
    await b.send(ex, beat(0), "q0")  # type: ignore[arg-type]
    assert ex.sent[0].type == protocol.HEARTBEAT and ex.sent[0].reply_to == "q0"
    assert loads(ex.sent[0].body)["instance_id"] == "a-0"


def test_the_next_beat_is_due_at_the_first_slot_after_now() -> None:
    b = batcher(interval_s=5.0)
    b._phase = 100.0
    assert b.next_due(100.2) == 105.0
    assert b.next_due(104.9) == 105.0  # early once, then on the slots
    assert b.next_due(105.0) == 110.0
    assert b.next_due(117.0) == 120.0


async def test_a_session_stopped_in_its_window_is_taken_out_and_the_rest_go() -> None:
    b, ex = batcher(window_s=0.05), Exchange()
    stopped = asyncio.ensure_future(b.send(ex, beat(0), "q0"))  # type: ignore[arg-type]
    kept = asyncio.ensure_future(b.send(ex, beat(1), "q1"))  # type: ignore[arg-type]
    await asyncio.sleep(0)
    stopped.cancel()
    await kept
    assert stopped.cancelled()
    assert len(ex.sent) == 1 and loads(ex.sent[0].body)["instance_id"] == "a-1"


async def test_a_failed_publish_reaches_every_session_of_the_window() -> None:
    b, ex = batcher(), Exchange(fail=ConnectionError("broker away"))
    outcomes = await asyncio.gather(
        *(b.send(ex, beat(i), f"q{i}") for i in range(2)),  # type: ignore[arg-type]
        return_exceptions=True,
    )
    assert [type(o) for o in outcomes] == [ConnectionError, ConnectionError]
    assert b.messages == 0
    # the next window is a new one
    ex.fail = None
    await b.send(ex, beat(0), "q0")  # type: ignore[arg-type]
    assert b.messages == 1
