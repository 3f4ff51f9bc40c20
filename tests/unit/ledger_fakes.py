"""Stand-ins for what an `OutcomeLedger` writes to: its example memory and its Redis."""

from __future__ import annotations

from typing import Any

from mesh.router.memory import Outcome


class FakeMemory:
    """Records each `record_many` call; every text takes `slot` (-1: none is sampled)."""

    def __init__(self, slot: int = 0) -> None:
        self.slot = slot
        self.writes: list[list[Outcome]] = []

    @property
    def recorded(self) -> list[Outcome]:
        return [o for write in self.writes for o in write]

    async def record_many(self, outcomes: list[Outcome]) -> list[int]:
        self.writes.append(outcomes)
        return [self.slot] * len(outcomes)


class FakePipeline:
    def hset(self, *args: Any, **kwargs: Any) -> None: ...

    def expire(self, *args: Any) -> None: ...

    async def execute(self) -> None: ...


class FakeConn:
    class redis:
        @staticmethod
        def pipeline(transaction: bool = False) -> FakePipeline:
            return FakePipeline()

    class keys:
        @staticmethod
        def outcome(task_id: str) -> str:
            return f"outcome:{task_id}"
