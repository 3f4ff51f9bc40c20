"""`mesh events` lines: local ISO times, and alerts with their state, subject and message."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from mesh.cli.events import line
from mesh.observer.alerts import Alert
from mesh.schemas import Event

#: 2026-12-01T15:36:40.997Z
TS_MS = 1_796_139_400_997


@pytest.fixture
def tokyo(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


@pytest.mark.usefixtures("tokyo")
def test_the_time_is_local_iso_8601_with_its_offset() -> None:
    text = line(Event(type="task.completed", ts_ms=TS_MS, task_id="t1", agent_id="pay"))
    assert text == "2026-12-02T00:36:40.997+09:00 task.completed task=t1 agent=pay"


@pytest.mark.usefixtures("tokyo")
def test_an_alert_says_its_state_subject_and_message() -> None:
    alert = Alert(
        kind="no_consumer",
        subject="shop.router",
        state="raised",
        message="no router consumes shop.router",
        ts_ms=TS_MS,
    )
    assert line(alert.event("obs-1"), "shop:observer") == (
        "2026-12-02T00:36:40.997+09:00 alert.no_consumer state=raised subject=shop.router "
        "by=shop:observer - no router consumes shop.router"
    )


@pytest.mark.usefixtures("tokyo")
def test_a_dropped_dead_letter_alert_names_its_queue() -> None:
    event = Event(
        type="alert.dead_letter_dropped",
        ts_ms=TS_MS,
        task_id="t9",
        data={"reason": "expired", "queue": "shop.dead.expired", "dropped": 3, "total": 7},
    )
    assert line(event).endswith(
        "alert.dead_letter_dropped task=t9 reason=expired queue=shop.dead.expired dropped=3"
    )
