"""`bench/procstat.snapshot`: a named process's CPU includes what it started (a router's fit
process), never a descendant measured under its own name."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from bench import procstat


def test_a_child_counts_with_its_parent_unless_it_is_named() -> None:
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    # the parent waits for its child, which burns 0.3 CPU-seconds, then reads stdin
    parent_code = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {busy!r}])\n"
        "print(child.pid, flush=True)\n"
        "sys.stdin.read()\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", parent_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as parent:
        assert parent.stdout is not None and parent.stdin is not None
        child = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while (procstat.cpu_seconds(child) or 0.0) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.02)
        own = procstat.cpu_seconds(parent.pid)
        together = procstat.snapshot({"parent": parent.pid})["parent"]
        apart = procstat.snapshot({"parent": parent.pid, "child": child})
        parent.stdin.close()
    assert own is not None
    assert together >= own + 0.25  # the child's CPU with its parent's
    assert apart["parent"] < own + 0.1 and apart["child"] >= 0.25  # each under its name
    assert os.getpid() not in (parent.pid, child)
