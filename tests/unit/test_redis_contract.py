"""The ``x-mesh-redis`` contract says what the Python worker does: same functions, same
keys in the same order, as many arguments."""

from __future__ import annotations

from typing import Any

import pytest

from mesh.asyncapi import document
from mesh.config import Settings
from mesh.dispatch.store import Holder, TaskStore
from mesh.keys import Keys
from mesh.redis_contract import describe, functions, key_templates
from mesh.registry import fencing
from mesh.schemas import Result, TaskEnvelope

NS = "acme"
AGENT, INSTANCE = "billing", "billing-1"


class Recorder:
    """A Redis client that records each FCALL and answers `reply`."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.calls: list[tuple[str, list[str], list[Any]]] = []

    async def fcall(self, name: str, numkeys: int, *rest: Any) -> Any:
        self.calls.append((name, list(rest[:numkeys]), list(rest[numkeys:])))
        return self.reply


def expected_keys(function: str, records: Keys, ids: dict[str, str], fields: int) -> list[str]:
    """The keys the contract names for `function`, filled in as a worker would."""
    mesh = Keys(NS)
    templates = key_templates(NS)
    out = []
    for entry in functions()[function]["keys"][:fields]:
        family = entry.split(":")[0].split(";")[0]
        key = templates[family]
        key = key.replace("{records}", records.prefix).replace("{prefix}", mesh.prefix)
        for name, value in ids.items():
            key = key.replace("{" + name + "}", value)
        out.append(key)
    return out


@pytest.mark.parametrize("access_control", [False, True])
async def test_claim_finish_release_and_apply_once_match_the_contract(
    access_control: bool,
) -> None:
    settings = Settings(namespace=NS, access_control=access_control)
    mesh = Keys(NS)
    records = mesh.for_agent(AGENT) if access_control else mesh
    envelope = TaskEnvelope(capability="x", task_id="t1", trace_id="tr1")
    holder = Holder(INSTANCE, 7)
    ids = {"taskId": "t1", "traceId": "tr1", "agentId": AGENT, "name": "refund"}

    redis = Recorder(["claimed", "0", 1, "0"])
    store = TaskStore(redis, records, settings, instances=mesh)
    await store.claim(envelope, holder, agent_id=AGENT, redelivered=False, lifetime_end_ms=1)
    redis.reply = ["ok"]
    result = Result(task_id="t1", status="completed", output={})
    waiters = not access_control
    await store.finish(result, "completed", by=INSTANCE, holder=holder, agent_id=AGENT,
                       with_waiters=waiters, seal=access_control)  # fmt: skip
    await store.release("t1", holder, "retrying", by=INSTANCE)
    redis.reply = 1
    await store.apply_once("t1", holder, "refund")

    contract = functions()
    for (name, keys, args), function in zip(
        redis.calls, ["claim", "finish", "release", "apply_once"], strict=True
    ):
        spec = contract[function]
        assert name == spec["name"]
        assert len(args) == len(spec["args"]), function
        fields = len(keys)
        want = expected_keys(function, records, ids, fields)
        if function == "finish":
            if access_control:  # the waiters' place holds the idem key again, then sealed
                want[3] = want[0]
                assert keys[5] == mesh.sealed(AGENT, "t1")
                want[5] = keys[5]
            assert len(keys) == (6 if access_control else 5)
        assert keys == want, function


def test_check_is_the_fencing_library_function() -> None:
    spec = functions()["check"]
    assert spec["name"] == fencing.LIBRARY.function_name("check")
    assert spec["keys"] == ["instance"]


def test_the_document_carries_the_contract_of_its_namespace() -> None:
    doc = document(Settings(namespace=NS))
    assert doc["x-mesh-redis"] == describe(NS)
    assert doc["x-mesh-redis"]["namespace"] == NS
    assert key_templates(NS)["instance"] == "{prefix}:instance:{instanceId}"
    assert key_templates(NS)["idem"] == "{records}:idem:{taskId}"
