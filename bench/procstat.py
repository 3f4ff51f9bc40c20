"""A bench's processes: CPU time from /proc/<pid>/stat, the pids of RabbitMQ and Redis, and
stopping the children it started."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Mapping

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (None: gone or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces: split after its closing parenthesis
    return raw[raw.rindex(")") + 2 :].split()


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of `pid` in seconds (None when the process is gone or unreadable)."""
    fields = _stat(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _children() -> dict[int, list[int]]:
    """Every live process's children, by parent pid."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None:
                found.setdefault(int(fields[1]), []).append(int(entry))
    return found


def tree_cpu_seconds(
    pid: int, children: Mapping[int, list[int]], named: frozenset[int] = frozenset()
) -> float | None:
    """CPU seconds of `pid` and of every live descendant not in `named` (a router's fit
    process is part of the router; a process measured under its own name is not part of
    its parent, nor is what it started); None when `pid` is gone."""
    own = cpu_seconds(pid)
    if own is None:
        return None
    below = (c for c in children.get(pid, ()) if c not in named)
    return own + sum(tree_cpu_seconds(c, children, named) or 0.0 for c in below)


def snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds of every named process that can be read, with its descendants that are
    not named themselves."""
    children, named = _children(), frozenset(pids.values())
    found = {name: tree_cpu_seconds(pid, children, named) for name, pid in pids.items()}
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
