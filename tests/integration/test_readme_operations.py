"""The README's operation blocks, run as printed against the real broker and Redis, in
one mesh so the router loads its model once:

- ``cli``: the commands of "Running it" (its ``&`` lines in the background, from a fresh
  folder); ``TASK_ID`` is the id ``mesh request`` printed, ``AGENT`` the refunds agent,
  ``A.json`` / ``L.jsonl`` / ``LEARN.jsonl`` a slice of ``bench/data/clinc150``; optional
  ``[...]`` parts are given;
- ``human``: a request no agent is close to waits for a person, who takes and answers it;
- ``bridge`` and ``bridge-card``: both bridges, with ``http://127.0.0.1:8080`` the
  address of a loopback endpoint this test serves (the JSON answers and the agent card);
- ``node``: the Node.js agent (``npm ci`` through `agents._node.install`, which runs that
  very command under a lock shared with the demo and its test).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agents import _node as node
from mesh.config import Settings
from mesh.management import Management
from tests.integration.worker_process import settings_env
from tests.readme_blocks import ROOT, commands

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(420)]

MESH_BIN = Path(sys.executable).parent
CARD = {
    "name": "Warranty Desk",
    "description": "Warranty questions about purchased devices.",
    "url": "http://127.0.0.1/ask",
    "version": "1",
    "skills": [
        {
            "id": "warranty",
            "name": "Warranty terms",
            "description": "How long a warranty lasts and what it covers",
            "examples": ["is my phone still under warranty"],
        }
    ],
}


class Served:
    """The loopback endpoint: the Authorization headers it saw."""

    def __init__(self) -> None:
        self.auth: list[str] = []


@pytest.fixture
def endpoint() -> Iterator[tuple[str, Served]]:
    served = Served()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(CARD)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            served.auth.append(self.headers.get("Authorization", ""))
            self._answer({"answer": f"FAQ: {body['text']}"})

        def _answer(self, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", served
    server.shutdown()
    server.server_close()


class Shell:
    """Lines run by bash as a user's shell runs them: `mesh` on the PATH, the test's
    namespace; ``&`` lines kept running until `stop`."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self.env, self.cwd = env, cwd
        self.background: list[subprocess.Popen[bytes]] = []

    def run(self, line: str, cwd: Path | None = None, timeout: float = 120) -> str:
        if line.endswith("&"):
            self.background.append(
                subprocess.Popen(
                    ["bash", "-c", f"exec {line[:-1]}"],
                    cwd=cwd or self.cwd,
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            return ""
        done = subprocess.run(
            ["bash", "-c", line],
            cwd=cwd or self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"{line}\n{done.stdout[-1500:]}{done.stderr[-1500:]}"
        return done.stdout

    def until(self, line: str, ok: str, timeout: float = 120, code: int = 0) -> str:
        """Run `line` until it exits `code` with `ok` in its output (a router loading)."""
        end = time.monotonic() + timeout
        while True:
            done = subprocess.run(
                ["bash", "-c", line], cwd=self.cwd, env=self.env, capture_output=True, text=True
            )
            if done.returncode == code and ok in done.stdout:
                return done.stdout
            if time.monotonic() > end:
                raise AssertionError(f"{line}: no {ok!r} in {timeout:.0f} s: {done.stdout}")
            time.sleep(0.5)  # a poll of a separate process, with its deadline above

    def stop(self) -> None:
        for proc in self.background:
            proc.terminate()
        for proc in self.background:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _calibration_files(folder: Path) -> None:
    data = ROOT / "bench" / "data" / "clinc150"
    agents = json.loads((data / "agents.json").read_text())[:3]
    ids = {a["agent_id"] for a in agents}
    (folder / "A.json").write_text(json.dumps(agents))
    for source, name, count in (("val", "L", 12), ("learn", "LEARN", 6)):
        rows = [r for r in (data / f"{source}.jsonl").read_text().splitlines() if r]
        picked = [r for r in rows if json.loads(r)["expected"] in ids][:count]
        (folder / f"{name}.jsonl").write_text("\n".join(picked) + "\n")


def test_the_operation_and_bridge_blocks_run(
    settings: Settings, tmp_path: Path, endpoint: tuple[str, Served]
) -> None:
    url, served = endpoint
    env = settings_env(settings) | {"KB_TOKEN": "kb-secret"}
    env["PATH"] = f"{MESH_BIN}:{env['PATH']}"
    env["PYTHONPATH"] = str(ROOT)  # `agents.support`, as from the checkout
    _calibration_files(tmp_path)
    shell = Shell(env, tmp_path)
    task_id = ""
    try:
        for line in commands("cli"):
            line = line.replace("[--yes]", "--yes").replace("[", "").replace("]", "")
            if "--reload" in line:
                line += " &"  # it runs until stopped, like the lines above it
            line = line.replace("TASK_ID", task_id).replace("AGENT", "support.refunds")
            if line.startswith("mesh request"):
                out = shell.until(line, '"agent_id":"support.refunds"')
                assert json.loads(out)["status"] == "completed", out
                task_id = json.loads(out)["task_id"]
            elif line.startswith("mesh calibrate"):
                out = shell.run(line, timeout=240)
                assert "threshold" in json.loads(out), out
            else:
                out = shell.run(line)
            if line.startswith("mesh agents"):
                assert "support.refunds" in out and "support.logistics" in out, out
            if line.startswith("mesh task"):
                assert "completed" in out, out

        # the human block: a request no agent is close to
        asked = shell.until(
            "mesh request 'zxqv plorft wibble' --wait-s 30", '"queued_for_human"', code=1
        )
        waiting = json.loads(asked)["task_id"]
        for line in commands("human"):
            line = line.replace("[TASK_ID]", waiting).replace("TASK_ID", waiting)
            out = shell.run(line)
            if line.startswith("mesh human list"):
                assert waiting in out, out
        assert "completed" in shell.run(f"mesh task {waiting}")

        for block, agent_id, text in (
            (commands("bridge"), "kb.faq", "what is your return policy"),
            (commands("bridge-card"), "warranty-desk", "is my phone still under warranty"),
        ):
            for line in block:
                shell.run(line.replace("http://127.0.0.1:8080", url) + " &")
            out = shell.until(f"mesh request '{text}' --target {agent_id}", f'"{agent_id}"')
            assert json.loads(out)["output"] == {"answer": f"FAQ: {text}"}, out
        assert served.auth[0] == "Bearer kb-secret"

        install, agent, request = commands("node")
        assert install == f"npm ci --prefix {node.NODE_DIR.relative_to(ROOT)}"
        if node.missing():
            pytest.fail(f"{' and '.join(node.missing())} missing: the node block cannot run")
        node.install()
        # the agent follows the AsyncAPI document of its namespace (the repository's is
        # namespace mesh's), as the demo gives it
        shell.run(f"mesh asyncapi --out {tmp_path / 'asyncapi.json'}")
        shell.env["MESH_ASYNCAPI"] = str(tmp_path / "asyncapi.json")
        shell.run(agent, cwd=ROOT)
        out = shell.until(request, '"agent_id":"node.text-stats"')
        assert json.loads(out)["output"]["words"] == 3, out
    finally:
        shell.stop()
        Management(settings).purge_namespace(settings.namespace)
