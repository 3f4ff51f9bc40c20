"""A bench's processes: CPU time from /proc/<pid>/stat, the pids of RabbitMQ and Redis, and
stopping the children it started."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Mapping

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of `pid` in seconds (None when the process is gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces: split after its closing parenthesis
    fields = raw[raw.rindex(")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / CLK_TCK


def snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds of every named process that can be read."""
    found = {name: cpu_seconds(pid) for name, pid in pids.items()}
    return {name: secs for name, secs in found.items() if secs is not None}


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU seconds spent by each process between two snapshots."""
    return {name: after[name] - before[name] for name in after if name in before}


def broker_pid() -> int | None:
    """The pid of RabbitMQ's Erlang VM (beam.smp), or None."""
    try:
        out = subprocess.run(
            ["pgrep", "-f", "beam.smp"], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    pids = [int(p) for p in out.split()]
    return min(pids) if pids else None


def stop_all(procs: Iterable[subprocess.Popen[bytes]], grace_s: float) -> None:
    """SIGTERM every child still running, wait up to `grace_s` in all, SIGKILL the rest."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
