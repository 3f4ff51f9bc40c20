"""`with_retries`: a call that succeeds at once builds no retry policy; one that fails
for a transient reason is tried again under the policy, anything else is raised."""

from __future__ import annotations

from typing import Any

import pytest

import mesh.retrying
from mesh.retrying import with_retries


async def test_a_first_try_that_succeeds_builds_no_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_policy(*args: Any) -> Any:
        raise AssertionError("a policy was built")

    monkeypatch.setattr(mesh.retrying, "policy", no_policy)

    async def ok() -> int:
        return 7

    assert await with_retries(ok) == 7


async def test_a_transient_failure_is_tried_again_and_any_other_is_raised() -> None:
    calls = 0

    async def flaky() -> int:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ConnectionError("the broker went away")
        return calls

    assert await with_retries(flaky, max_delay_s=5) == 3

    async def bad() -> int:
        raise ValueError("not transient")

    with pytest.raises(ValueError):
        await with_retries(bad)

    async def down() -> int:
        raise ConnectionError("still away")

    with pytest.raises(ConnectionError):
        await with_retries(down, max_delay_s=0.2)
