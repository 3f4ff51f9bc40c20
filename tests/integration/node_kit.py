"""The Node.js agent of ``agents/node/`` as a test runs it: installed once, started as a process.

`ensure_node_modules` runs ``npm ci`` into ``agents/node/node_modules`` when the lock file
changed since the last install (`agents._node.install`: a stamp holds its digest, a file
lock makes concurrent test processes install once). `NodeAgent` starts ``text-stats.js``
with the worker's settings (`tests.integration.worker_process.worker_settings`) and the
AsyncAPI document of the test's namespace, and reads its JSON log lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
from pathlib import Path
from typing import Any

from agents import _node as node
from mesh.asyncapi import render
from mesh.config import Settings
from tests.integration.worker_process import settings_env

NODE_DIR = node.NODE_DIR


def ensure_node_modules() -> None:
    """``npm ci`` once per version of ``package-lock.json`` (`agents._node.install`, the
    demo's installer too).

    Raises:
        RuntimeError: node or npm is missing, or the install failed (its output says why).
    """
    node.install()


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
