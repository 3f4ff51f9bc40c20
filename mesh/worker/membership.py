"""The worker's view of the registry: a session that holds a lease and a fencing token.

`WorkerRuntime` talks to a `Membership`; `mesh.registry.session.RegistrySession` is the real
one. `StaticMembership` serves workers run without a registry (tests of the bare data path).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from mesh.errors import StaleFencingToken


class Membership(Protocol):
    """Registration, heartbeats and fencing of one worker instance."""

    @property
    def token(self) -> int: ...

    async def start(self, load: Callable[[], int], stuck: Callable[[], int] | None = None) -> None:
        """Register (retrying while the registry is not there yet), then heartbeat `load()`
        and `stuck()`."""

    async def check(self, token: int) -> None:
        """Raise `StaleFencingToken` unless `token` is still current."""

    async def renew(self, stale_token: int, timeout_s: float) -> bool:
        """`stale_token` was refused: get a new lease (one re-registration however many
        tasks ask) and wait up to `timeout_s` for it. True once the token changed."""

    async def stop(self) -> None:
        """Deregister and stop heartbeating; safe to call twice."""


class StaticMembership:
    """A membership with a fixed token and no registry."""

    def __init__(self, agent_id: str, token: int = 1) -> None:
        self.agent_id = agent_id
        self._token = token

    @property
    def token(self) -> int:
        return self._token

    async def start(self, load: Callable[[], int], stuck: Callable[[], int] | None = None) -> None:
        return None

    async def check(self, token: int) -> None:
        if token != self._token:
            raise StaleFencingToken(self.agent_id, token, self._token)

    async def renew(self, stale_token: int, timeout_s: float) -> bool:
        return self._token != stale_token

    async def stop(self) -> None:
        return None
