"""Where a router's head fits run: a child process of their own, or a worker thread.

A full fit is ~1,800 small numpy steps in Python (`mesh.router.fitting.fit_member`). In a
worker thread of the router every step holds the GIL the event loop needs to route: while a
router fitted its head after start or after a registration, the latency of the tasks it
routed meanwhile rose several fold. `FitProcess` runs fits in one child interpreter per
router process instead (``python -m mesh.router.fits``), shared by the routers of that
process and started with the first router's index keeper (`FitRunner.start`):

- the parent sends a `FitJob` (a snapshot of plain arrays) and waits for its `FitResult` in
  a worker thread that sleeps on a pipe, so the event loop goes on at full speed;
- the fit reports the child's CPU-seconds, which the router's `FitBudget` counts; the child
  runs on idle CPU only (``SCHED_IDLE``; nice 19 where that is refused), with numpy's BLAS
  on ``blas_threads`` threads: on a busy machine a fit waits instead of taking a core from
  the broker, the workers or the router (the router's first fit, before it serves, runs in
  a thread of its own: `Refitter.refit`);
- `interrupt` gives a running or queued fit up at its next step (a fit of the settled index
  when the load comes back, a router stopping): the child's reader thread marks it;
- the child exits when the parent's end of its pipe closes (the router stopped or was
  killed); if the child dies, the fit waiting for it fails (`FitProcessLost`) and the next
  one starts a new child.

``MESH_REFIT_PROCESS=false`` keeps fits in a worker thread (`InlineFits`), as before.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import logging
import os
import pickle
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
import traceback
from typing import IO, Any, Protocol

from mesh.config import Settings
from mesh.errors import FitInterrupted, FitProcessLost
from mesh.router.fitting import FitJob, FitResult

__all__ = ["Fit", "FitProcess", "FitRunner", "InlineFits", "fit_runner"]

logger = logging.getLogger(__name__)

#: a frame on the pipe: its length, then a pickle
_LENGTH = struct.Struct("!Q")

#: what `FitRunner.run` returns: the fit (None: given up, `interrupt`) and its CPU-seconds
Fit = tuple[FitResult | None, float]


class FitRunner(Protocol):
    """Runs fits away from the event loop; `run` blocks (call it through a thread)."""

    def start(self) -> None:
        """Get ready for fits (a child process starts importing); returns at once."""
        ...

    def ticket(self) -> int:
        """A number for the next fit, to `interrupt` it by."""
        ...

    def run(self, job: FitJob, ticket: int) -> Fit: ...

    def interrupt(self, ticket: int) -> None:
        """Give fit `ticket` up at its next step (no effect once it ended)."""
        ...


class _Tickets:
    def __init__(self) -> None:
        self._next = itertools.count(1)

    def ticket(self) -> int:
        return next(self._next)


class InlineFits(_Tickets):
    """Fits in the calling thread (``MESH_REFIT_PROCESS=false``): the router's own GIL."""

    def __init__(self) -> None:
        super().__init__()
        self._interrupted: set[int] = set()

    def start(self) -> None:
        return None

    def run(self, job: FitJob, ticket: int) -> Fit:
        cpu = time.thread_time()
        try:
            return job.run(lambda: ticket in self._interrupted), time.thread_time() - cpu
        except FitInterrupted:
            return None, time.thread_time() - cpu
        finally:
            self._interrupted.discard(ticket)

    def interrupt(self, ticket: int) -> None:
        self._interrupted.add(ticket)


class FitProcess(_Tickets):
    """One child interpreter that runs the fits of this process's routers, one at a time
    (see the module docstring)."""

    def __init__(self, blas_threads: int | None = 1) -> None:
        super().__init__()
        self.blas_threads = blas_threads
        #: fits without a network (`FitJob.heavy` False) run here, in the calling thread
        self._here = InlineFits()
        self._child: subprocess.Popen[bytes] | None = None
        #: one fit at a time on the pipe; writes (fits, interrupts) one frame at a time
        self._turn = threading.Lock()
        self._write = threading.Lock()
        #: children started (the first, and one after each that was lost)
        self.started = 0

    @property
    def pid(self) -> int | None:
        """The running child's process id (None before the first fit)."""
        return None if self._child is None else self._child.pid

    def start(self) -> None:
        """Start the child now (its imports take about a CPU-second, on idle CPU), so the
        first fit does not wait for them. Never blocks: a fit running now has a child."""
        if self._turn.acquire(blocking=False):
            try:
                self._running()
            finally:
                self._turn.release()

    def run(self, job: FitJob, ticket: int) -> Fit:
        if not job.heavy:
            # two means (no head: too few agents, or past max_cells): cheaper here than
            # the arrays' trip through the pipe, which at 10,000 agents is ~100 MB
            return self._here.run(job, ticket)
        with self._turn:
            child = self._running()
            try:
                self._send(child, ("fit", ticket, job))
                assert child.stdout is not None
                kind, answered, result, cpu_s = _read(child.stdout)
            except (OSError, EOFError, pickle.UnpicklingError, ValueError) as exc:
                self._lost(child)
                raise FitProcessLost(f"the fit process {child.pid} stopped: {exc!r}") from exc
            if answered != ticket:
                self._lost(child)
                raise FitProcessLost(f"the fit process answered fit {answered}, not {ticket}")
            if kind == "failed":
                raise RuntimeError(f"head fit failed in the fit process:\n{result}")
            return (result if kind == "fitted" else None), cpu_s

    def interrupt(self, ticket: int) -> None:
        child = self._child
        if child is None:
            return
        with contextlib.suppress(OSError):  # the child is gone: its fit fails on its own
            self._send(child, ("interrupt", ticket, None))

    def close(self) -> None:
        """Stop the child (it exits when its input closes; killed after 5 s)."""
        child, self._child = self._child, None
        if child is None:
            return
        with self._write:
            if child.stdin is not None:
                child.stdin.close()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        if child.stdout is not None:
            child.stdout.close()

    def _running(self) -> subprocess.Popen[bytes]:
        child = self._child
        if child is not None and child.poll() is None:
            return child
        if child is not None:
            self._lost(child)
        env = dict(os.environ)
        if self.blas_threads is not None:
            for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
                env[name] = str(self.blas_threads)
        self._child = subprocess.Popen(
            [sys.executable, "-m", "mesh.router.fits"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        self.started += 1
        # idle CPU only from its first instruction on (the child asks again, for where
        # this is refused): its imports too wait for idle cores
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setscheduler(self._child.pid, os.SCHED_IDLE, os.sched_param(0))
        logger.debug("fit process %d started", self._child.pid)
        return self._child

    def _send(self, child: subprocess.Popen[bytes], message: tuple[str, int, Any]) -> None:
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        with self._write:
            assert child.stdin is not None
            child.stdin.write(_LENGTH.pack(len(body)) + body)
            child.stdin.flush()

    def _lost(self, child: subprocess.Popen[bytes]) -> None:
        if self._child is child:
            self._child = None
        if child.poll() is None:
            child.kill()
        child.wait()
        for pipe in (child.stdin, child.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        logger.warning("fit process %d lost (exit code %s)", child.pid, child.returncode)


_shared: FitProcess | None = None
_shared_lock = threading.Lock()


def fit_runner(settings: Settings) -> FitRunner:
    """The runner of a router's fits: this process's `FitProcess` (one for all its
    routers, stopped at exit), or `InlineFits` when ``refit_process`` is off."""
    global _shared
    if not settings.refit_process:
        return InlineFits()
    with _shared_lock:
        if _shared is None:
            _shared = FitProcess(settings.blas_threads)
            atexit.register(_shared.close)
        return _shared


def _read(stream: IO[bytes]) -> Any:
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        raise EOFError("the pipe closed")
    (size,) = _LENGTH.unpack(head)
    body = stream.read(size)
    if len(body) < size:
        raise EOFError("the pipe closed mid-frame")
    return pickle.loads(body)


# --- the child -------------------------------------------------------------------------------


def _idle_only() -> None:
    """This process (and the threads it starts) runs when a core is otherwise idle."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or refused: the lowest priority instead
        with contextlib.suppress(OSError):
            os.nice(19)


def serve() -> None:
    """The fit process: read fits and interrupts from stdin, answer fits on stdout.

    A reader thread takes every frame as it arrives (an interrupt reaches the fit it names
    while that fit runs) and exits the process when stdin closes: the router is gone.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the router's
    _idle_only()
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print of a library must not reach the pipe
    requests = os.fdopen(os.dup(0), "rb")
    fits: queue.SimpleQueue[tuple[int, FitJob]] = queue.SimpleQueue()
    interrupted: set[int] = set()

    def read() -> None:
        try:
            while True:
                kind, ticket, job = _read(requests)
                if kind == "interrupt":
                    interrupted.add(ticket)
                else:
                    fits.put((ticket, job))
        except BaseException:  # EOF (the router stopped or died) or a broken frame
            os._exit(0)

    threading.Thread(target=read, name="fit-requests", daemon=True).start()
    while True:
        ticket, job = fits.get()
        cpu = time.process_time()
        answer: tuple[str, Any]
        try:
            answer = ("fitted", job.run(lambda: ticket in interrupted))  # noqa: B023
        except FitInterrupted:
            answer = ("interrupted", None)
        except Exception:
            answer = ("failed", traceback.format_exc())
        for done in [t for t in list(interrupted) if t <= ticket]:
            interrupted.discard(done)  # interrupts of fits that ended before they arrived
        kind, result = answer
        message = (kind, ticket, result, time.process_time() - cpu)
        body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
        answers.write(_LENGTH.pack(len(body)) + body)
        answers.flush()


if __name__ == "__main__":
    serve()
