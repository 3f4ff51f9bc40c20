"""bench/load.py's per-component figures: processes summed into components, medians and
ranges over runs, the budget verdict, the scale-out ratio; broker connections to pids."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from bench.brokerstat import by_name, count_delta, pid_of
from bench.load_components import by_component, component_rows, component_table


def closed(routers: int, cpu_runs: list[dict[str, float]], mode: str = "semantic") -> Any:
    runs = [
        SimpleNamespace(
            cpu_ms_per_task=cpu,
            amqp_per_task={"client": 1.0, "router0": 2.0, "worker0": 1.5, "worker1": 1.5},
            redis_per_task={"commands": 9.0, "reads": 3.0, "cmd:hset": 4.0, "cmd:info": 0.1},
        )
        for cpu in cpu_runs
    ]
    return SimpleNamespace(
        config=f"mesh n100 r{routers}", kind="mesh", agents=100, routers=routers, mode=mode,
        runs=runs,
    )  # fmt: skip


def test_processes_are_summed_into_components() -> None:
    one = by_component({"router0": 1.5, "worker0": 0.25, "worker1": 0.5, "client": None}, 1)
    assert one == {"routers": 1.5, "workers": 0.75}
    two = by_component({"router0": 1.0, "router1": 1.25}, 2)
    assert two == {"router0": 1.0, "router1": 1.25, "routers": 2.25}


def test_rows_carry_median_range_and_budget() -> None:
    runs = [{"router0": r, "worker0": 0.25, "client": 0.5, "total": r + 0.75} for r in (3, 1, 2)]
    rows = {r.component: r for r in component_rows([closed(1, runs)])}
    assert list(rows) == ["client", "routers", "workers", "redis", "total"]
    routers = rows["routers"].cpu_ms_per_task
    assert routers is not None
    assert (routers.median, routers.low, routers.high) == (2.0, 1.0, 3.0)
    assert rows["routers"].budget_ms == 2.0 and rows["routers"].amqp_per_task == 2.0
    assert rows["workers"].amqp_per_task == 3.0
    assert rows["redis"].redis["commands"] == 9.0 and rows["redis"].cpu_ms_per_task is None
    text = component_table([closed(1, runs)])
    assert "routers          2.00   [1.00-3.00]    2.0 yes          2.00" in text
    assert "client           0.50   [0.50-0.50]    0.4  NO          1.00" in text
    assert "cmds 9.0 reads 3.0: hset 4.00" in text and "info" not in text


def test_two_routers_are_compared_with_one() -> None:
    one = closed(1, [{"router0": 2.0}])
    two = closed(2, [{"router0": 1.25, "router1": 1.25}])
    text = component_table([one, two])
    assert "mesh n100 r2 semantic: 2.50 ms vs 2.00 ms with 1 router = 1.25x" in text


def test_broker_connections_map_to_processes_of_the_namespace() -> None:
    assert pid_of("bench-1/router/host:4242", "bench-1") == 4242
    assert pid_of("bench-10/router/host:4242", "bench-1") is None
    assert pid_of("bench-1/raw-worker/host", "bench-1") is None
    named = by_name({4242: 7, 99: 1}, {"router0": 4242, "client": 5})
    assert named == {"router0": 7}
    assert count_delta({"router0": 2}, {"router0": 7, "worker0": 3}) == {"router0": 5, "worker0": 3}
