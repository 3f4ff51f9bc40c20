"""A small client of the RabbitMQ management HTTP API (`/api/...` on :15672).

Used by `mesh` views and by tests to inspect or clean a namespace, and by `mesh access`
to provision vhosts, users, permissions, topic permissions, limits and policies (which
needs a management user with the ``administrator`` tag). Blocking (urllib): call it from
a thread in async code. An ``https://`` URL is checked against ``MESH_MANAGEMENT_CA_FILE``
(or the system's CAs); a failed TLS handshake is a `ConfigError`, not "unreachable".
Request bodies (they may hold a password) are never logged nor put in an error message.
"""

from __future__ import annotations

import base64
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from mesh.config import Settings, mask_url
from mesh.connection import find_tls_error, tls_config_error, tls_reason
from mesh.errors import ConfigError, ManagementRequestFailed, ServiceUnavailable
from mesh.hints import management_hint
from mesh.schemas.codec import dumps, loads


def _q(name: str) -> str:
    """One path segment of the API (a vhost ``/`` is ``%2F``)."""
    return urllib.parse.quote(name, safe="")


#: how many times a GET the management API answers with a server error is asked in all
GET_TRIES = 3
#: the pause before the second try (then twice that before the third)
GET_RETRY_PAUSE_S = 0.2


class Management:
    def __init__(self, settings: Settings, vhost: str = "/") -> None:
        url = settings.management_url.get_secret_value()
        parts = urllib.parse.urlsplit(url)
        self._masked = mask_url(url)
        self._base = f"{parts.scheme}://{parts.hostname}:{parts.port or 15672}"
        self._user = urllib.parse.unquote(parts.username or "guest")
        password = urllib.parse.unquote(parts.password or "guest")
        auth = f"{self._user}:{password}".encode()
        self._auth = "Basic " + base64.b64encode(auth).decode()
        self._vhost = urllib.parse.quote(vhost, safe="")
        ca_file = settings.management_ca_file
        self._ca_file = str(ca_file) if ca_file is not None else None
        #: https://: the server's certificate is checked against MESH_MANAGEMENT_CA_FILE
        #: (or the system's CAs), host name included
        self._context: ssl.SSLContext | None = None
        if parts.scheme == "https":
            try:
                self._context = ssl.create_default_context(cafile=self._ca_file)
            except ssl.SSLError as exc:
                raise ConfigError(
                    f"MESH_MANAGEMENT_CA_FILE={self._ca_file} holds no usable CA certificate "
                    f"({tls_reason(exc)}): point it at a PEM bundle"
                ) from None

    @property
    def user(self) -> str:
        """The management API user of ``MESH_MANAGEMENT_URL``."""
        return self._user

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        missing_ok: bool = False,
    ) -> Any:
        """`method` `path` with a JSON `body`; a 404 is None for DELETE (or `missing_ok`).

        A GET the API answers with a server error is asked again, `GET_TRIES` times in all
        (CI once got a 500 for ``GET /api/users`` while other tests were creating and
        deleting users; a read asked again is harmless, a write is never sent twice)."""
        for attempt in range(1, GET_TRIES + 1):
            try:
                return self._call_once(method, path, body, missing_ok=missing_ok)
            except ManagementRequestFailed as exc:
                if method != "GET" or exc.status < 500 or attempt == GET_TRIES:
                    raise
            time.sleep(GET_RETRY_PAUSE_S * attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    def _call_once(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        missing_ok: bool = False,
    ) -> Any:
        headers = {"Authorization": self._auth}
        data = None
        if body is not None:
            data = dumps(body)
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self._base + path, data=data, method=method, headers=headers
        )
        try:
            with urllib.request.urlopen(request, timeout=10, context=self._context) as response:
                answer = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404 and (method == "DELETE" or missing_ok):
                return None
            if exc.code == 401 or (exc.code == 403 and method == "GET"):
                raise ConfigError(
                    f"the RabbitMQ management API at {self._masked} refused the login "
                    f"(HTTP {exc.code}): set MESH_MANAGEMENT_URL to a user with the "
                    "management tag, e.g. http://USER:PASS@127.0.0.1:15672/"
                ) from None
            if exc.code == 403:
                raise ConfigError(
                    f"the RabbitMQ management API at {self._masked} refused {method} {path} "
                    f"(HTTP 403): user {self._user!r} may not (managing vhosts, users, "
                    "permissions and policies needs the administrator tag)"
                ) from None
            raise ManagementRequestFailed(method, path, exc.code, _reason(exc)) from None
        except (urllib.error.URLError, OSError) as exc:
            tls = find_tls_error(exc)
            if tls is not None:
                raise tls_config_error(
                    "the RabbitMQ management API",
                    self._masked,
                    tls,
                    variable="MESH_MANAGEMENT_URL",
                    ca_option="MESH_MANAGEMENT_CA_FILE",
                    ca_given=self._ca_file,
                    plain_fix="use http:// or the port of its TLS listener (15671)",
                ) from None
            raise ServiceUnavailable(
                "RabbitMQ management API",
                self._masked,
                management_hint(),
            ) from None
        return loads(answer) if answer else None

    def exchanges(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", f"/api/exchanges/{self._vhost}")
        return result

    def connections(self) -> list[dict[str, Any]]:
        """Every client connection of the broker (name, user, client properties)."""
        found: list[dict[str, Any]] = self._call("GET", "/api/connections")
        return found

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
        """Delete every queue and exchange named ``<namespace>.*``; returns how many.

        The lists are read by name only: a broker's whole queue list with its statistics
        is slow to build, and a test's teardown calls this every time.
        """
        prefix = namespace + "."
        count = 0
        for kind, delete in (("queues", self.delete_queue), ("exchanges", self.delete_exchange)):
            rows: list[dict[str, Any]] = self._call(
                "GET", f"/api/{kind}/{self._vhost}?columns=name"
            )
            for name in (r["name"] for r in rows):
                if name.startswith(prefix):
                    delete(name)
                    count += 1
        return count

    # --- vhosts ----------------------------------------------------------------------------
    def vhost(self, name: str) -> dict[str, Any] | None:
        """The vhost `name` (None: there is none)."""
        result: dict[str, Any] | None = self._call(
            "GET", f"/api/vhosts/{_q(name)}", missing_ok=True
        )
        return result

    def put_vhost(self, name: str, description: str = "") -> None:
        """Create vhost `name` (the API also grants its own user ``.*`` on it)."""
        self._call("PUT", f"/api/vhosts/{_q(name)}", {"description": description})

    def delete_vhost(self, name: str) -> None:
        self._call("DELETE", f"/api/vhosts/{_q(name)}")

    def put_vhost_limit(self, vhost: str, limit: str, value: int) -> None:
        """``max-queues`` or ``max-connections`` of a vhost (-1: no limit)."""
        self._call("PUT", f"/api/vhost-limits/{_q(vhost)}/{_q(limit)}", {"value": value})

    def delete_vhost_limit(self, vhost: str, limit: str) -> None:
        self._call("DELETE", f"/api/vhost-limits/{_q(vhost)}/{_q(limit)}")

    def vhost_limits(self, vhost: str) -> dict[str, int]:
        rows: list[dict[str, Any]] = (
            self._call("GET", f"/api/vhost-limits/{_q(vhost)}", missing_ok=True) or []
        )
        return {k: int(v) for row in rows for k, v in row.get("value", {}).items()}

    # --- users -----------------------------------------------------------------------------
    def users(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._call("GET", "/api/users")
        return result

    def get_user(self, name: str) -> dict[str, Any] | None:
        """The user `name` (None: there is none); holds its tags as a list."""
        result: dict[str, Any] | None = self._call("GET", f"/api/users/{_q(name)}", missing_ok=True)
        return result

    def put_user(self, name: str, password: str | None, tags: tuple[str, ...] = ()) -> None:
        """Create user `name` or replace its password and tags (None: no password at all, the
        user cannot log in with one; ``rabbitmqctl change_password`` gives it one again)."""
        login = {"password": password} if password is not None else {"password_hash": ""}
        self._call("PUT", f"/api/users/{_q(name)}", {**login, "tags": ",".join(tags)})

    def delete_user(self, name: str) -> None:
        """Delete a user (its permissions, topic permissions and limits go with it)."""
        self._call("DELETE", f"/api/users/{_q(name)}")

    def put_user_limit(self, user: str, limit: str, value: int) -> None:
        """``max-connections`` or ``max-channels`` of a user (-1: no limit)."""
        self._call("PUT", f"/api/user-limits/{_q(user)}/{_q(limit)}", {"value": value})

    def user_limits(self, user: str) -> dict[str, int]:
        rows: list[dict[str, Any]] = (
            self._call("GET", f"/api/user-limits/{_q(user)}", missing_ok=True) or []
        )
        return {k: int(v) for row in rows for k, v in row.get("value", {}).items()}

    # --- permissions -----------------------------------------------------------------------
    def vhost_permissions(self, vhost: str) -> list[dict[str, Any]]:
        """Every user's permissions in `vhost`."""
        result: list[dict[str, Any]] = (
            self._call("GET", f"/api/vhosts/{_q(vhost)}/permissions", missing_ok=True) or []
        )
        return result

    def permissions(self, vhost: str, user: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call(
            "GET", f"/api/permissions/{_q(vhost)}/{_q(user)}", missing_ok=True
        )
        return result

    def put_permissions(
        self, vhost: str, user: str, *, configure: str, write: str, read: str
    ) -> None:
        self._call(
            "PUT",
            f"/api/permissions/{_q(vhost)}/{_q(user)}",
            {"configure": configure, "write": write, "read": read},
        )

    def delete_permissions(self, vhost: str, user: str) -> None:
        self._call("DELETE", f"/api/permissions/{_q(vhost)}/{_q(user)}")

    def topic_permissions(self, vhost: str, user: str) -> list[dict[str, Any]]:
        """The user's topic permissions in `vhost`, one per exchange."""
        result: list[dict[str, Any]] = (
            self._call("GET", f"/api/topic-permissions/{_q(vhost)}/{_q(user)}", missing_ok=True)
            or []
        )
        return result

    def put_topic_permission(
        self, vhost: str, user: str, *, exchange: str, write: str, read: str
    ) -> None:
        self._call(
            "PUT",
            f"/api/topic-permissions/{_q(vhost)}/{_q(user)}",
            {"exchange": exchange, "write": write, "read": read},
        )

    def delete_topic_permissions(self, vhost: str, user: str) -> None:
        """Delete every topic permission of `user` in `vhost`."""
        self._call("DELETE", f"/api/topic-permissions/{_q(vhost)}/{_q(user)}")

    # --- policies --------------------------------------------------------------------------
    def policy(self, vhost: str, name: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self._call(
            "GET", f"/api/policies/{_q(vhost)}/{_q(name)}", missing_ok=True
        )
        return result

    def put_policy(
        self,
        vhost: str,
        name: str,
        *,
        pattern: str,
        definition: dict[str, Any],
        priority: int = 0,
        apply_to: str = "queues",
    ) -> None:
        self._call(
            "PUT",
            f"/api/policies/{_q(vhost)}/{_q(name)}",
            {
                "pattern": pattern,
                "definition": definition,
                "priority": priority,
                "apply-to": apply_to,
            },
        )

    def delete_policy(self, vhost: str, name: str) -> None:
        self._call("DELETE", f"/api/policies/{_q(vhost)}/{_q(name)}")


def _reason(exc: urllib.error.HTTPError) -> str:
    """The API's own reason for an error status (its JSON ``reason``), in one line."""
    try:
        raw = exc.read()
        data = loads(raw) if raw else {}
    except (OSError, ValueError):
        data = {}
    reason = data.get("reason") if isinstance(data, dict) else None
    text = str(reason or exc.reason or "no reason given")
    return " ".join(text.split())[:300]
