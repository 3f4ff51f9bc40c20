"""The Node.js agent of ``agents/node/`` as a test runs it: installed once, started as a process.

`ensure_node_modules` runs ``npm ci`` into ``agents/node/node_modules`` when the lock file
changed since the last install (a stamp holds its digest), under a file lock so concurrent
test processes install once. `NodeAgent` starts ``text-stats.js`` with the worker's settings
(`tests.integration.worker_process.worker_settings`) and the
AsyncAPI document of the test's namespace, and reads its JSON log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from mesh.asyncapi import render
from mesh.config import Settings
from tests.integration.worker_process import settings_env

NODE_DIR = Path(__file__).resolve().parents[2] / "agents" / "node"
STAMP = NODE_DIR / "node_modules" / ".agent-reach-lock-sha256"


def ensure_node_modules() -> None:
    """``npm ci`` once per version of ``package-lock.json``.

    Raises:
        RuntimeError: node or npm is missing, or the install failed (its output says why).
    """
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("node and npm are needed (apt-get install nodejs npm)")
    digest = hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    lock_path = Path(tempfile.gettempdir()) / "agent-reach-node-agent.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.exists() and STAMP.read_text() == digest:
            return
        done = subprocess.run(
            ["npm", "ci", "--no-audit", "--no-fund"],
            cwd=NODE_DIR,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci failed in {NODE_DIR}:\n{done.stdout}\n{done.stderr}")
        STAMP.write_text(digest)


class NodeAgent:
    """One ``node text-stats.js`` process and the JSON lines it logged."""

    def __init__(self, settings: Settings, agent_id: str, workdir: Path) -> None:
        self.settings = settings
        self.agent_id = agent_id
        self.workdir = workdir
        self.lines: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self, timeout: float = 20.0) -> NodeAgent:
        """Start the agent and wait until it registered and consumes."""
        document = self.workdir / "asyncapi.json"
        document.write_bytes(render(self.settings))
        env = {
            **settings_env(self.settings),
            "MESH_ASYNCAPI": str(document),
            "MESH_NODE_AGENT_ID": self.agent_id,
            "MESH_NODE_DRILLS": "1",
        }
        self._proc = await asyncio.create_subprocess_exec(
            "node",
            str(NODE_DIR / "text-stats.js"),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._reader = asyncio.create_task(self._read())
        await self.wait_for("consuming", timeout=timeout)
        return self

    async def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        async for raw in self._proc.stdout:
            text = raw.decode(errors="replace").strip()
            try:
                line = json.loads(text)
            except json.JSONDecodeError:
                line = {"level": "raw", "msg": text}
            self.lines.append(line)
            self._changed.set()

    def logged(self, msg: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("msg") == msg]

    async def wait_for(self, msg: str, *, count: int = 1, timeout: float = 10.0) -> dict[str, Any]:
        """The `count`-th line logged with `msg` (the process ending first fails)."""
        async with asyncio.timeout(timeout):
            while len(self.logged(msg)) < count:
                if self._proc is not None and self._proc.returncode is not None:
                    raise AssertionError(f"node agent exited: {self.lines[-10:]}")
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 0.5)
        return self.logged(msg)[count - 1]

    async def stop(self) -> int | None:
        """SIGTERM (it deregisters), then its exit code; killed after 10 s."""
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return None if proc is None else proc.returncode
        proc.send_signal(signal.SIGTERM)
        try:
            code = await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            code = await proc.wait()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        return code
