"""The management client asks a GET again after a server error, never a write (a local
HTTP server stands in for the API: what is tested is the client's policy)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from typing import ClassVar

import pytest

from mesh import management
from mesh.config import Settings
from mesh.errors import ManagementRequestFailed
from mesh.management import GET_TRIES, Management


class Api(http.server.BaseHTTPRequestHandler):
    #: statuses to answer, in order (then 200 with an empty list)
    answers: ClassVar[list[int]] = []
    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        Api.seen.append(self.command)
        status = Api.answers.pop(0) if Api.answers else 200
        body = b"[]" if status == 200 else b'{"error":"internal","reason":"boom"}'
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_PUT = _answer

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Management]:
    monkeypatch.setattr(management, "GET_RETRY_PAUSE_S", 0.0)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Api.answers, Api.seen = [], []
    url = f"http://guest:guest@127.0.0.1:{server.server_address[1]}/"
    try:
        yield Management(Settings(management_url=url))  # type: ignore[arg-type]
    finally:
        server.shutdown()
        server.server_close()


def test_a_get_answered_500_once_is_asked_again_and_succeeds(api: Management) -> None:
    Api.answers = [500]
    assert api.users() == []
    assert Api.seen == ["GET", "GET"]


def test_a_get_that_keeps_failing_raises_after_the_last_try(api: Management) -> None:
    Api.answers = [500] * GET_TRIES
    with pytest.raises(ManagementRequestFailed) as caught:
        api.users()
    assert caught.value.status == 500
    assert Api.seen == ["GET"] * GET_TRIES


def test_a_write_answered_500_is_not_sent_again(api: Management) -> None:
    Api.answers = [500]
    with pytest.raises(ManagementRequestFailed):
        api._call("PUT", "/api/vhosts/x", {})
    assert Api.seen == ["PUT"]
