"""`FitProcess`: head fits in a child interpreter, given up on request, restarted when lost,
gone with the router."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from mesh.errors import FitProcessLost
from mesh.router.fits import FitProcess, InlineFits
from mesh.router.fitting import FitConfig, FitJob

DIM = 16


def _job(steps: int = 30, agents: int = 4) -> FitJob:
    rng = np.random.default_rng(7)
    names = [f"agent-{i}" for i in range(agents)]
    return FitJob(
        1,
        {a: i for i, a in enumerate(names)},
        [rng.normal(size=DIM).astype(np.float32) for _ in names],
        [rng.normal(size=(6, DIM)).astype(np.float32) for _ in names],
        DIM,
        FitConfig(steps=steps, hidden=8, members=2),
    )


@pytest.fixture
def fits() -> Iterator[FitProcess]:
    process = FitProcess()
    yield process
    process.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(")")[-1].split()[0] != "Z"


def _wait(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(condition) and condition():
            return True
        time.sleep(0.05)
    return False


def test_a_fit_in_the_process_is_the_fit_in_a_thread(fits: FitProcess) -> None:
    job = _job()
    result, cpu_s = fits.run(job, fits.ticket())
    expected, _ = InlineFits().run(job, 1)
    assert result is not None and expected is not None
    assert result.head is not None and expected.head is not None
    assert result.agents == expected.agents
    np.testing.assert_array_equal(result.head.weights, expected.head.weights)
    np.testing.assert_array_equal(result.request_mean, expected.request_mean)
    assert cpu_s > 0  # the child's CPU, for the router's budget
    assert fits.pid is not None and fits.pid != os.getpid()
    assert fits.started == 1
    assert os.sched_getscheduler(fits.pid) == os.SCHED_IDLE  # idle CPU only


def test_an_interrupted_fit_gives_up_and_the_next_one_runs(fits: FitProcess) -> None:
    fits.run(_job(steps=2), fits.ticket())  # the child is up
    ticket = fits.ticket()
    outcome: list[object] = []
    runner = threading.Thread(target=lambda: outcome.append(fits.run(_job(10**6), ticket)))
    runner.start()
    fits.interrupt(ticket)  # a million steps: it is running or queued when this arrives
    runner.join(timeout=30)
    assert not runner.is_alive()
    [(result, cpu_s)] = outcome  # type: ignore[misc]
    assert result is None and cpu_s >= 0
    after, _ = fits.run(_job(), fits.ticket())
    assert after is not None and after.head is not None
    assert fits.started == 1  # the same child


def test_a_lost_process_fails_its_fit_and_the_next_fit_starts_a_new_one(
    fits: FitProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    fits.run(_job(steps=2), fits.ticket())
    pid = fits.pid
    assert pid is not None
    failure: list[BaseException] = []
    # the kill must land while the child holds the long fit (killed before it was sent,
    # the fit would start a new child and run there)
    sent = threading.Event()
    send = fits._send

    def send_and_tell(child: subprocess.Popen[bytes], message: tuple[str, int, Any]) -> None:
        send(child, message)
        if message[0] == "fit":
            sent.set()

    monkeypatch.setattr(fits, "_send", send_and_tell)

    def long_fit() -> None:
        try:
            fits.run(_job(10**6), fits.ticket())
        except BaseException as exc:
            failure.append(exc)

    runner = threading.Thread(target=long_fit)
    runner.start()
    assert sent.wait(timeout=30)
    os.kill(pid, signal.SIGKILL)
    runner.join(timeout=30)
    assert not runner.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], FitProcessLost)
    result, _ = fits.run(_job(), fits.ticket())
    assert result is not None and result.head is not None
    assert fits.started == 2 and fits.pid not in (None, pid)


def test_the_process_ends_when_its_router_is_killed() -> None:
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                """
                import sys, threading
                from tests.unit.test_fit_process import _job
                from mesh.router.fits import FitProcess
                fits = FitProcess()
                fits.run(_job(steps=2), fits.ticket())
                print(fits.pid, flush=True)
                threading.Thread(target=fits.run, args=(_job(10**6), fits.ticket())).start()
                sys.stdin.read()  # until the test kills this process
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    with parent:  # closes its pipes
        try:
            assert parent.stdout is not None
            child = int(parent.stdout.readline())
            assert _alive(child)
            parent.kill()  # SIGKILL: nothing of the parent runs any more
            parent.wait()
            assert _wait(lambda: not _alive(child), timeout=10), "the fit process outlived it"
        finally:
            if parent.poll() is None:
                parent.kill()


def test_a_fit_without_a_head_stays_in_the_router(fits: FitProcess) -> None:
    """Past max_cells (or below two agents) a fit is two means: no trip to the child."""
    job = _job()
    light = FitJob(
        job.version,
        job.agents,
        job.capabilities,
        job.requests,
        DIM,
        FitConfig(steps=30, hidden=8, members=2, max_cells=10),
    )
    assert job.heavy and not light.heavy
    result, _ = fits.run(light, fits.ticket())
    assert result is not None and result.head is None
    np.testing.assert_allclose(result.capability_mean, np.mean(job.capabilities, axis=0))
    assert fits.started == 0 and fits.pid is None


def test_a_started_process_imports_on_idle_cpu_and_serves_the_first_fit(
    fits: FitProcess,
) -> None:
    fits.start()  # returns at once: the child imports meanwhile
    assert fits.started == 1 and fits.pid is not None
    assert os.sched_getscheduler(fits.pid) == os.SCHED_IDLE  # set by the router at spawn
    result, _ = fits.run(_job(), fits.ticket())
    assert result is not None and result.head is not None
    assert fits.started == 1  # the same child
