"""`Fleet`: the demo's processes, started the way a user starts them (``mesh registry``,
``mesh router``, ``mesh worker agents.x:agent``, ``node agents/node/text-stats.js``), each
logging to a file of its own.

Every process is started in a session of its own, so a Ctrl-C reaches the demo only and
the fleet is stopped in order (`stop`: SIGTERM to all, then SIGKILL to what is left after
the grace). On Linux each child also gets SIGTERM when the demo dies, whatever kills it
(``PR_SET_PDEATHSIG``): no orphan outlives the demo.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

#: prctl(2) option: the signal a child gets when its parent dies
_PR_SET_PDEATHSIG = 1


def mesh_command() -> list[str]:
    """How to run ``mesh``: the console script next to this interpreter, else ``python -c``."""
    script = Path(sys.executable).with_name("mesh")
    if script.is_file():
        return [str(script)]
    found = shutil.which("mesh")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from mesh.cli.main import main; sys.exit(main())"]


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Fleet:
    """Named child processes of the demo."""

    def __init__(self, cwd: Path, env: Mapping[str, str], log_dir: Path) -> None:
        self.cwd = cwd
        self.env = dict(env)
        self.log_dir = log_dir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._mesh = mesh_command()

    def start(
        self, name: str, args: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``mesh ARGS`` as `name` (its output goes to ``<log_dir>/<name>.log``)."""
        return self.run(name, [*self._mesh, *args], env)

    def run(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start the program `argv` as `name` (an agent in another language, the HTTP
        endpoint behind a bridge), with the fleet's environment and `env` over it."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                list(argv),
                cwd=self.cwd,
                env={**self.env, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self.procs[name] = proc
        logger.info("started %s pid=%d: %s", name, proc.pid, " ".join(argv))
        return proc

    def died(self) -> dict[str, int]:
        """Processes that ended on their own, with their exit codes."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    def kill(self, name: str) -> None:
        """SIGKILL `name` and reap it (a crash: nothing of it shuts down cleanly)."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    def log_tail(self, name: str, lines: int = 5) -> str:
        path = self.log_dir / f"{name}.log"
        if not path.is_file():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM every live process, wait up to `grace_s`, SIGKILL what is left."""
        live = [p for p in self.procs.values() if p.poll() is None]
        for proc in live:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        for proc in live:
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def pids(self) -> list[int]:
        return [p.pid for p in self.procs.values()]


__all__ = ["Fleet", "mesh_command"]
