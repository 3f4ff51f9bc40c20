"""The HTTP bridge (`mesh.bridge`): an endpoint on loopback answers tasks the router routes.

The endpoint is the standard library's ``http.server`` in a thread: what it got (headers,
body) is recorded, and its answer per path is scripted (an answer, a 500 once, a 404, a
server too slow for the deadline).
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from mesh.bridge import http_agent
from mesh.client import MeshClient
from mesh.connection import MeshConnection
from tests.integration.routing_kit import SemanticMesh, agent
from tests.integration.worker_process import settings_env, worker_settings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]")

KB = "kb.http"
KB_TEXT = "Answers from the knowledge base: return policy, warranty terms, shipping rules."
KB_EXAMPLES = ["what is your return policy", "how long is the warranty", "退货政策是什么"]
WEATHER = agent(
    "weather",
    "Weather forecasts: rain, temperature and wind for a city in the coming days.",
    ["will it rain in Paris tomorrow", "how hot will it be this weekend", "明天北京下雨吗"],
)


@dataclass
class Endpoint:
    """The loopback server: what each path received, and when to let a slow answer go."""

    url: str
    received: dict[str, list[tuple[dict[str, str], dict[str, Any]]]] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    answered: threading.Event = field(default_factory=threading.Event)


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    state = Endpoint("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            mode = body["payload"].get("mode", "ok")
            seen = state.received.setdefault(mode, [])
            seen.append(({k.lower(): v for k, v in self.headers.items()}, body))
            if mode == "flaky" and len(seen) == 1:
                self._answer(500, {"error": "warming up"})
            elif mode == "missing":
                self._answer(404, {"error": "no such article"})
            elif mode == "slow":
                state.release.wait(10)
                self._answer(200, {"late": True})
            else:
                self._answer(200, {"answer": f"KB: {body['text']}", "payload": body["payload"]})
            state.answered.set()

        def _answer(self, status: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()
    thread.join(5)


@pytest.fixture
async def kb_mesh(mesh: SemanticMesh, endpoint: Endpoint) -> AsyncIterator[str]:
    """Registry, router and the bridged agent (its endpoint's answer chosen by the
    payload's ``mode``) in this process."""
    kb, bridge = http_agent(KB, KB_TEXT, f"{endpoint.url}/kb", examples=KB_EXAMPLES)
    await mesh.start(WEATHER, kb)
    try:
        yield KB
    finally:
        await bridge.aclose()


@asynccontextmanager
async def _bridge(args: list[str], env: dict[str, str]) -> AsyncIterator[None]:
    """`mesh bridge http ...` as its own process for the block; it must stop cleanly."""
    proc = subprocess.Popen(  # noqa: ASYNC220 - a long-lived process, waited for off the loop
        [MESH, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        yield
    finally:
        proc.terminate()
        _out, err = await asyncio.to_thread(proc.communicate, timeout=30)
    assert proc.returncode == 0, err.decode()


async def test_a_routed_task_reaches_the_endpoint_and_its_json_is_the_output(
    kb_mesh: str, conn: MeshConnection, endpoint: Endpoint
) -> None:
    async with MeshClient(conn) as client:
        result = await client.request("what is your return policy?", {"order": "A-1"})
    assert result.status == "completed", result
    assert result.agent_id == KB and result.route is not None
    assert result.route.strategy != "target"
    assert result.output == {
        "answer": "KB: what is your return policy?",
        "payload": {"order": "A-1"},
    }
    [(headers, body)] = endpoint.received["ok"]
    trace = TRACEPARENT.fullmatch(headers["traceparent"])
    assert trace is not None and trace.group(1) == result.trace_id
    assert body["task_id"] == headers["x-mesh-task-id"] == result.task_id
    deadline = int(headers["x-mesh-deadline-ms"])
    assert deadline == body["deadline_ms"] and deadline > 0
    assert body["attempt"] == 0


async def test_a_500_is_retried_and_the_next_answer_completes_the_task(
    kb_mesh: str, conn: MeshConnection, endpoint: Endpoint
) -> None:
    async with MeshClient(conn) as client:
        result = await client.request("ask", {"mode": "flaky"}, target=kb_mesh)
    assert result.status == "completed", result
    assert [body["attempt"] for _h, body in endpoint.received["flaky"]] == [0, 1]


async def test_a_4xx_fails_the_task_with_its_status(
    kb_mesh: str, conn: MeshConnection, endpoint: Endpoint
) -> None:
    async with MeshClient(conn) as client:
        result = await client.request("ask", {"mode": "missing"}, target=kb_mesh)
    assert result.status == "failed" and result.error is not None, result
    assert result.error.code == "http_404"
    assert result.error.details["status"] == 404
    assert "no such article" in result.error.details["body"]
    assert len(endpoint.received["missing"]) == 1  # not retried


async def test_a_slow_endpoint_meets_the_deadline(
    kb_mesh: str, conn: MeshConnection, endpoint: Endpoint
) -> None:
    async with MeshClient(conn) as client:
        result = await client.request("ask", {"mode": "slow"}, target=kb_mesh, timeout_ms=800)
    assert result.status == "expired" and result.error is not None, result
    assert result.error.code == "deadline_passed"
    assert len(endpoint.received["slow"]) == 1
    assert not endpoint.answered.is_set()  # the server was still working on it


async def test_the_cli_bridges_an_agent_described_by_an_a2a_card(
    mesh: SemanticMesh, conn: MeshConnection, endpoint: Endpoint, tmp_path: Path
) -> None:
    card = {
        "name": "Warranty Desk",
        "description": "Warranty questions about purchased devices.",
        "url": f"{endpoint.url}/a2a",
        "version": "1.2",
        "skills": [
            {
                "id": "warranty-terms",
                "name": "Warranty terms",
                "description": "How long a warranty lasts and what it covers",
                "tags": ["warranty", "保修"],
                "examples": ["is my phone still under warranty", "保修期多久"],
            }
        ],
    }
    (tmp_path / "card.json").write_text(json.dumps(card))
    await mesh.start(WEATHER)
    agent_id = "warranty-desk"
    env = settings_env(await worker_settings(conn, agent_id))
    args = [
        "bridge",
        "http",
        agent_id,
        "--url",
        f"{endpoint.url}/ok",
        "--card",
        str(tmp_path / "card.json"),
    ]
    async with _bridge(args, env):
        assert mesh.selector is not None
        await mesh.selector.wait_routable([agent_id], timeout=30)
        async with MeshClient(conn) as client:
            result = await client.request("is my laptop still under warranty?")
        registered = await conn.redis.hgetall(conn.keys.agent(agent_id))
    assert result.status == "completed" and result.agent_id == agent_id, result
    assert result.output is not None and result.output["answer"].startswith("KB: is my laptop")
    text = b" ".join(registered.values()).decode()
    assert "Warranty terms: How long a warranty lasts" in text
    assert "保修期多久" in text


async def test_the_cli_bridges_a_python_agents_registration_with_tags_and_contract(
    mesh: SemanticMesh, conn: MeshConnection, endpoint: Endpoint, tmp_path: Path
) -> None:
    """The demo's knowledge agent behind the bridge registers as the Python one does: its
    tags route, and a payload outside its input contract never reaches the endpoint."""
    from agents import knowledge
    from mesh.bridge import registration_document

    path = tmp_path / "knowledge.registration.json"
    path.write_text(json.dumps(registration_document(knowledge.agent), ensure_ascii=False))
    await mesh.start(WEATHER)
    agent_id = knowledge.agent.agent_id
    env = settings_env(await worker_settings(conn, agent_id))
    args = ["bridge", "http", agent_id, "--url", f"{endpoint.url}/ok", "--registration", str(path)]
    async with _bridge(args, env):
        assert mesh.selector is not None
        await mesh.selector.wait_routable([agent_id], timeout=30)
        async with MeshClient(conn) as client:
            tagged = await client.request(
                "can I get a VAT invoice for my company", required_tags={"domain": "knowledge"}
            )
            refused = await client.request(
                "can I get a VAT invoice for my company", {"order_no": "A-1001"}
            )
        registered = await conn.redis.hgetall(conn.keys.agent(agent_id))
    assert tagged.status == "completed" and tagged.agent_id == agent_id, tagged
    assert refused.status == "failed" and refused.agent_id == agent_id, refused
    assert refused.error is not None and "order_no" in json.dumps(refused.error.model_dump())
    assert len(endpoint.received["ok"]) == 1  # only the task that fits the contract
    text = b" ".join(registered.values()).decode()
    assert "知识库 / Knowledge base" in text and "knowledge" in text
    assert "additionalProperties" in text  # the input contract, as the registry holds it
