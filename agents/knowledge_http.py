"""The knowledge base as a plain HTTP endpoint, the way a service outside the mesh runs.

The demo puts it behind the HTTP bridge (``mesh bridge http cs.knowledge --url
http://127.0.0.1:PORT/ask``): the bridge POSTs each task as JSON (``{"text", "payload",
"task_id", "trace_id", "deadline_ms", "attempt"}``) and this server answers with the JSON
object of `agents.knowledge.answer`, the knowledge agent's whole logic, over its own copy
of the FAQ (`agents._data.FAQ`: a service of its own holds its own data). Standard library
only::

    python -m agents.knowledge_http --port 8080

``GET /health`` answers ``{"ok": true}``; anything but a JSON object POSTed to ``/ask`` is
a 400 (the bridge fails the task ``http_400``).
"""

from __future__ import annotations

import argparse
import json
import logging
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agents._data import FAQ, said
from agents.knowledge import answer

#: the path the bridge POSTs to
ASK_PATH = "/ask"
#: the agent id the answers name (`handled_by`, as the Python worker's answers do)
AGENT_ID = "cs.knowledge"
#: the largest request body read
MAX_BODY = 64_000

logger = logging.getLogger("agents.knowledge_http")


def reply(body: Any) -> tuple[HTTPStatus, dict[str, Any]]:
    """The status and JSON object answering a POSTed `body` (already parsed)."""
    if not isinstance(body, dict) or not isinstance(body.get("text"), str):
        return HTTPStatus.BAD_REQUEST, {"error": 'expected {"text": ..., "payload": {...}}'}
    payload = body.get("payload") if isinstance(body.get("payload"), dict) else {}
    question = said(body["text"], payload.get("text"))
    return HTTPStatus.OK, {**answer(question, FAQ), "handled_by": [AGENT_ID]}


class Handler(BaseHTTPRequestHandler):
    server_version = "knowledge-http/1"

    def _send(self, status: HTTPStatus, body: dict[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(HTTPStatus.OK, {"ok": True})
        else:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"no {self.path}"})

    def do_POST(self) -> None:
        if self.path != ASK_PATH:
            self._send(HTTPStatus.NOT_FOUND, {"error": f"POST {ASK_PATH}"})
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": "body too large"})
            return
        try:
            body = json.loads(self.rfile.read(length) or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            body = None
        status, out = reply(body)
        logger.info(
            "POST %s task_id=%s traceparent=%s -> %d",
            ASK_PATH,
            self.headers.get("x-mesh-task-id"),
            self.headers.get("traceparent"),
            status,
        )
        self._send(status, out)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request is logged by do_POST


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="the knowledge base as an HTTP endpoint")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    logger.info("serving the knowledge base on http://%s:%d%s", args.host, args.port, ASK_PATH)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
