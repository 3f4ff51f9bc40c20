"""A small client of the RabbitMQ management HTTP API (`/api/...` on :15672).

Used by `mesh` views and by tests to inspect or clean a namespace. Blocking (urllib):
call it from a thread in async code.
"""

from __future__ import annotations

import base64
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mesh.config import Settings, mask_url
from mesh.errors import ConfigError, ServiceUnavailable
from schemas.codec import loads


class Management:
    def __init__(self, settings: Settings, vhost: str = "/") -> None:
        url = settings.management_url.get_secret_value()
        parts = urllib.parse.urlsplit(url)
        self._masked = mask_url(url)
        self._base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
        auth = f"{parts.username or 'guest'}:{parts.password or 'guest'}".encode()
        self._auth = "Basic " + base64.b64encode(auth).decode()
        self._vhost = urllib.parse.quote(vhost, safe="")

    def _call(self, method: str, path: str) -> Any:
        request = urllib.request.Request(
            self._base + path, method=method, headers={"Authorization": self._auth}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and method == "DELETE":
                return None
            if exc.code in (401, 403):
                raise ConfigError(
                    f"the RabbitMQ management API at {self._masked} refused the login "
                    f"(HTTP {exc.code}): set MESH_MANAGEMENT_URL to a user with the "
                    "management tag, e.g. http://USER:PASS@127.0.0.1:15672/"
                ) from None
            raise
        except (urllib.error.URLError, OSError):
            raise ServiceUnavailable(
                "RabbitMQ management API",
                self._masked,
                "enable it with `rabbitmq-plugins enable rabbitmq_management` (infra/up.sh does)",
            ) from None
        return loads(body) if body else None

    def exchanges(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/api/exchanges/{self._vhost}")
        return result

    def queues(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/api/queues/{self._vhost}")
        return result

    def queue(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "GET", f"/api/queues/{self._vhost}/{urllib.parse.quote(name, safe='')}"
        )
        return result

    def delete_queue(self, name: str) -> None:
        self._call("DELETE", f"/api/queues/{self._vhost}/{urllib.parse.quote(name, safe='')}")

    def delete_exchange(self, name: str) -> None:
        self._call("DELETE", f"/api/exchanges/{self._vhost}/{urllib.parse.quote(name, safe='')}")

    def purge_namespace(self, namespace: str) -> int:
        """Delete every queue and exchange named ``<namespace>.*``; returns how many."""
        prefix = namespace + "."
        count = 0
        for q in self.queues():
            if q["name"].startswith(prefix):
                self.delete_queue(q["name"])
                count += 1
        for ex in self.exchanges():
            if ex["name"].startswith(prefix):
                self.delete_exchange(ex["name"])
                count += 1
        return count
