"""`mesh.outage`: one WARNING per outage, one INFO when back, repeats at most once a minute,
and connection errors told from bugs; `mesh.logs.ConnectionNoise` drops library noise."""

from __future__ import annotations

import logging

import aiormq.exceptions
import pytest
import redis.exceptions

from mesh.logs import ConnectionNoise
from mesh.outage import OutageLog, Outages, RateLimitedLog, connection_failure
from mesh.redis_health import RedisHealth


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def messages(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "mesh.outage"]


def test_an_outage_is_one_warning_and_one_info_with_its_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "mesh.outage")
    clock = Clock()
    log = OutageLog("Redis", "redis://:******@db:6379/0", clock=clock)
    for _ in range(40):
        log.lost(redis.exceptions.ConnectionError("Error 111 connecting"), what="the sweep")
        clock.now += 0.25
    log.back()
    log.back()
    said = messages(caplog)
    assert said == [
        (
            "WARNING",
            "Redis at redis://:******@db:6379/0 lost in the sweep (ConnectionError: Error 111 "
            "connecting); retrying until it answers",
        ),
        ("INFO", "Redis at redis://:******@db:6379/0 is back after 10.0s (40 failed calls)"),
    ]
    assert log.healthy and log.outages == 1 and log.failures == 40


def test_a_flapping_dependency_is_said_once_a_minute_with_a_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "mesh.outage")
    clock = Clock()
    log = OutageLog("RabbitMQ", "amqp://guest:******@mq:5672/", clock=clock)
    for _ in range(6):  # down 1 s, up 9 s: six outages in a minute
        log.lost(aiormq.exceptions.ConnectionClosed(320, "CONNECTION_FORCED"))
        clock.now += 1
        log.back()
        clock.now += 9
    clock.now += 1
    log.lost(None)
    said = messages(caplog)
    assert [level for level, _ in said] == ["WARNING", "INFO", "WARNING"]
    assert said[2][1].endswith("(5 more in the last 60s not logged)"), said[2][1]
    assert log.outages == 7


def test_a_refused_command_is_a_cause_of_its_own() -> None:
    clock = Clock()
    limiter = RateLimitedLog(logging.getLogger("t"), 60, clock)
    assert limiter.may_say("lost") and limiter.may_say("ResponseError")
    assert not limiter.may_say("lost")
    clock.now += 60
    assert limiter.may_say("lost") and limiter.held_back("lost") == 1


def test_connection_errors_are_told_by_dependency_and_bugs_are_not() -> None:
    assert connection_failure(redis.exceptions.TimeoutError()) == "Redis"
    assert connection_failure(redis.exceptions.BusyLoadingError()) == "Redis"
    assert connection_failure(aiormq.exceptions.ChannelInvalidStateError("closed")) == "RabbitMQ"
    assert connection_failure(aiormq.exceptions.ConnectionClosed(320, "x")) == "RabbitMQ"
    assert connection_failure(redis.exceptions.ResponseError("OOM")) is None
    assert connection_failure(KeyError("x")) is None
    # a bare socket error counts only when a client library's frame raised it
    assert connection_failure(ConnectionResetError()) is None
    wrapped = RuntimeError("handler")
    wrapped.__cause__ = redis.exceptions.ConnectionError("lost")
    assert connection_failure(wrapped) == "Redis"


def test_outages_reports_to_the_right_dependency_and_not_a_bug() -> None:
    outages = Outages(OutageLog("RabbitMQ", "amqp://mq/"), OutageLog("Redis", "redis://db/0"))
    assert outages.report(redis.exceptions.ConnectionError("x"), what="loop")
    assert not outages.redis.healthy and outages.broker.healthy
    assert not outages.report(ValueError("bug"))
    health = RedisHealth("registry r1", outages.redis)
    health.failed("sweep", redis.exceptions.ResponseError("OOM command not allowed"))
    assert not health.healthy and health.outages == 1
    health.ok()
    assert health.healthy and outages.redis.healthy


def test_the_libraries_callback_errors_of_a_lost_connection_are_dropped() -> None:
    noise = ConnectionNoise()

    def record(name: str, msg: str, args: tuple[object, ...]) -> logging.LogRecord:
        return logging.LogRecord(name, logging.ERROR, __file__, 1, msg, args, None)

    lost = record(
        "aio_pika.tools",
        "Callback %r error: %s: %s",
        ("cb", "ChannelInvalidStateError", aiormq.exceptions.ChannelInvalidStateError("x")),
    )
    closed = record(
        "aio_pika.tools",
        "Callback %r error: %s: %s",
        ("cb", "RuntimeError", RuntimeError('<Connection: "amqp://mq/"> closed')),
    )
    bug = record("aio_pika.tools", "Callback %r error: %s: %s", ("cb", "KeyError", KeyError("k")))
    assert not noise.filter(lost) and not noise.filter(closed)
    assert noise.filter(bug)
