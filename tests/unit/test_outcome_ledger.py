from __future__ import annotations

from typing import Any, cast

from mesh.router.breaker import BreakerBoard
from mesh.router.memory import ExampleMemory, Outcome
from mesh.router.outcomes import OutcomeLedger
from mesh.schemas import Event, TaskEnvelope


class FakeMemory:
    def __init__(self) -> None:
        self.recorded: list[Outcome] = []

    async def record_many(self, outcomes: list[Outcome]) -> list[int]:
        self.recorded.extend(outcomes)
        return [0] * len(outcomes)  # every text takes slot 0


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


async def test_a_chosen_task_teaches_its_text_and_a_targeted_one_only_counts() -> None:
    memory = FakeMemory()
    ledger = OutcomeLedger(cast(Any, FakeConn()), cast(ExampleMemory, memory), BreakerBoard())
    chosen = TaskEnvelope(capability="what is my balance", timeout_ms=1_000)
    targeted = TaskEnvelope(capability="probe", target="a", timeout_ms=1_000)
    ledger.remember(chosen, "a")
    ledger.remember(targeted, "a", learns=False)
    for envelope in (chosen, targeted):
        event = Event(type="task.completed", task_id=envelope.task_id, agent_id="a")
        assert ledger.observe(event, own=True) == "a"

    learned = await ledger.flush()

    assert [(o.task_id, o.kind, o.learn_text) for o in memory.recorded] == [
        (chosen.task_id, "completed", "what is my balance"),
        (targeted.task_id, "completed", None),
    ]
    assert [(item.agent_id, item.text) for item in learned] == [("a", "what is my balance")]
    assert ledger.completed("a") == 2  # both count for its success rate
