from __future__ import annotations

from typing import Any, cast

from mesh.router.breaker import BreakerBoard
from mesh.router.memory import ExampleMemory
from mesh.router.outcomes import OutcomeLedger
from mesh.schemas import Event, TaskEnvelope
from tests.unit.ledger_fakes import FakeConn, FakeMemory


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
