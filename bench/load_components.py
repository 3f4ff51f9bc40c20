"""bench/load.py's per-component tables: CPU, AMQP publishes and Redis commands per task of
each closed-loop point, against the CPU budget per task; the idle table.

Components: the client (bench/load.py itself), each router and the routers summed, the
workers summed, the registry, RabbitMQ (beam.smp), Redis (redis-server). A closed-loop
point's figure is the median of its runs, with their range.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class Run(Protocol):
    """One closed-loop run of `bench.load` (its `Row`), as far as the tables read it."""

    @property
    def cpu_ms_per_task(self) -> Mapping[str, float]: ...
    @property
    def amqp_per_task(self) -> Mapping[str, float]: ...
    @property
    def redis_per_task(self) -> Mapping[str, float]: ...


class Closed(Protocol):
    """A repeated closed-loop point of `bench.load` (its `Closed`)."""

    @property
    def config(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def agents(self) -> int: ...
    @property
    def routers(self) -> int: ...
    @property
    def mode(self) -> str: ...
    @property
    def runs(self) -> Sequence[Run]: ...


class Idle(Protocol):
    """Each process's idle CPU of `bench.load` (its `Idle`)."""

    @property
    def config(self) -> str: ...
    @property
    def seconds(self) -> float: ...
    @property
    def cores(self) -> Mapping[str, float]: ...


#: CPU ms per semantic task at 100 agents, closed loop, 100 in flight (the CPU budget issue)
BUDGET_MS: dict[str, float] = {
    "routers": 2.0,
    "workers": 0.7,
    "rabbitmq": 1.2,
    "client": 0.4,
    "redis": 0.3,
}
ORDER = ("client", "router", "routers", "workers", "registry", "rabbitmq", "redis", "total")
#: Redis commands shown by name on the table, the most frequent first
TOP_COMMANDS = 6


def group(name: str) -> str:
    """The component of a process name: ``router1`` stays itself, ``worker3`` is a worker."""
    if name.startswith("worker"):
        return "workers"
    return name


def by_component(values: Mapping[str, float | None], routers: int) -> dict[str, float]:
    """Per-process figures summed by component, plus ``routers`` (the sum of every router)."""
    out: dict[str, float] = {}
    for name, value in values.items():
        if value is None:
            continue
        key = group(name)
        out[key] = out.get(key, 0.0) + value
        if name.startswith("router"):
            out["routers"] = out.get("routers", 0.0) + value
    if routers <= 1:  # one router: its line is the sum
        for name in [k for k in out if k.startswith("router") and k != "routers"]:
            del out[name]
    return out


@dataclass(slots=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(round(statistics.median(values), 3), min(values), max(values))


@dataclass(slots=True)
class ComponentRow:
    """One component of one closed-loop point: median [min-max] over its runs."""

    config: str
    mode: str
    component: str
    cpu_ms_per_task: Spread | None
    amqp_per_task: float | None
    budget_ms: float | None
    #: the Redis line only: commands and socket reads (about round trips) per task
    redis: dict[str, float] = field(default_factory=dict)


def _spreads(runs: Iterable[Mapping[str, float]]) -> dict[str, Spread]:
    collected: dict[str, list[float]] = {}
    for run in runs:
        for key, value in run.items():
            collected.setdefault(key, []).append(value)
    return {k: Spread.of(v) for k, v in collected.items()}


def _median_by_key(runs: Sequence[Mapping[str, float]]) -> dict[str, float]:
    return {k: s.median for k, s in _spreads(runs).items()}


def component_rows(closed: Sequence[Closed]) -> list[ComponentRow]:
    rows: list[ComponentRow] = []
    for c in closed:
        cpu = _spreads(by_component(r.cpu_ms_per_task, c.routers) for r in c.runs)
        amqp = _median_by_key([by_component(r.amqp_per_task, c.routers) for r in c.runs])
        redis = _median_by_key([r.redis_per_task for r in c.runs if r.redis_per_task])
        names = sorted(set(cpu) | set(amqp) | ({"redis"} if redis else set()), key=_rank)
        for name in names:
            rows.append(
                ComponentRow(
                    c.config,
                    c.mode,
                    name,
                    cpu.get(name),
                    amqp.get(name),
                    BUDGET_MS.get(name),
                    redis if name == "redis" else {},
                )
            )
    return rows


def _rank(name: str) -> tuple[int, str]:
    base = name.rstrip("0123456789")
    return (ORDER.index(base) if base in ORDER else len(ORDER), name)


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def component_table(closed: Sequence[Closed]) -> str:
    head = (
        f"{'config':18s} {'mode':8s} {'component':9s} {'cpu ms/task':>11s} {'range':>13s} "
        f"{'budget':>6s} {'ok':>3s} {'amqp pub/task':>13s}  redis per task"
    )
    lines = [
        "per component, closed loop: CPU ms per completed task, median [min-max] of the runs;",
        "AMQP messages published per task (management API, per connection of the namespace);",
        "Redis per task, whole server: commands (each one of a MULTI/EXEC, pipeline or Lua",
        "script counted, MULTI, EXEC and EVALSHA too) and socket reads (about one per round",
        "trip, a pipeline is one), then the most frequent commands",
        head,
        "-" * len(head),
    ]
    last = ("", "")
    for r in component_rows(closed):
        key = (r.config, r.mode)
        config, mode = (r.config, r.mode) if key != last else ("", "")
        last = key
        cpu = r.cpu_ms_per_task
        rng = "-" if cpu is None else f"[{cpu.low:.2f}-{cpu.high:.2f}]"
        ok = ""
        if cpu is not None and r.budget_ms is not None:
            ok = "yes" if cpu.median <= r.budget_ms else "NO"
        redis = ""
        if r.redis:
            redis = (
                f"cmds {r.redis.get('commands', 0):.1f} reads {r.redis.get('reads', 0):.1f}: "
                + ", ".join(f"{k[4:]} {v:.2f}" for k, v in top_commands(r.redis))
            )
        lines.append(
            f"{config:18s} {mode:8s} {r.component:9s} {_fmt(cpu.median if cpu else None):>11s}"
            f" {rng:>13s} {_fmt(r.budget_ms, 1):>6s} {ok:>3s} {_fmt(r.amqp_per_task):>13s}  {redis}"
        )
    lines += scale_out_lines(closed)
    return "\n".join(lines)


def top_commands(redis: Mapping[str, float]) -> list[tuple[str, float]]:
    cmds = [(k, v) for k, v in redis.items() if k.startswith("cmd:") and k != "cmd:info"]
    return sorted(cmds, key=lambda kv: -kv[1])[:TOP_COMMANDS]


def scale_out_lines(closed: Sequence[Closed]) -> list[str]:
    """The routers' CPU per task with 2+ routers against one router, same kind and mode."""
    one: dict[tuple[str, int, str], float] = {}
    for c in closed:
        if c.routers == 1:
            one[(c.kind, c.agents, c.mode)] = _routers_cpu(c)
    lines = []
    for c in closed:
        base = one.get((c.kind, c.agents, c.mode))
        if c.routers > 1 and base:
            ratio = _routers_cpu(c) / base
            lines.append(
                f"routers' CPU per task, {c.config} {c.mode}: {_routers_cpu(c):.2f} ms vs "
                f"{base:.2f} ms with 1 router = {ratio:.2f}x (budget <= 1.10x)"
            )
    return ["", *lines] if lines else []


def _routers_cpu(c: Closed) -> float:
    values = [by_component(r.cpu_ms_per_task, c.routers).get("routers", 0.0) for r in c.runs]
    return statistics.median(values) if values else 0.0


def idle_table(idle: Sequence[Idle], after_s: float) -> str:
    lines = [f"idle: CPU cores of each process, starting {after_s:.0f} s after the load stopped"]
    for i in idle:
        cells = ", ".join(
            f"{name} {cores:.3f}{'' if cores <= 0.02 or name in EXTERNAL else ' (> 0.02)'}"
            for name, cores in sorted(i.cores.items(), key=lambda kv: _rank(kv[0]))
        )
        lines.append(f"{i.config} over {i.seconds:.0f}s: {cells}")
    return "\n".join(lines)


#: not a mesh service: the idle budget does not apply
EXTERNAL = frozenset({"client", "rabbitmq", "redis"})
