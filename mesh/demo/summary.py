"""The demo's summary: per-agent figures, dead letters, the scenario's facts, the verdict;
as a table on the terminal and as JSON (``mesh demo --json PATH``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from mesh.connection import MeshConnection
from mesh.demo.script import DemoRun
from mesh.topology import DEAD_REASONS


async def dead_letters(conn: MeshConnection) -> dict[str, int]:
    """Messages waiting in each dead-letter queue of the namespace, by reason."""
    counts: dict[str, int] = {}
    channel = await conn.channel()
    try:
        for reason in DEAD_REASONS:
            queue = await channel.declare_queue(conn.topology.dead_queue(reason), passive=True)
            counts[reason] = int(queue.declaration_result.message_count or 0)
    finally:
        await channel.close()
    return counts


def agent_rows(figures: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Tasks, completed, success rate and p50 latency per agent, from a `Figures` snapshot."""
    rows = {}
    for agent_id, f in figures.get("agents", {}).items():
        tasks = f.get("tasks", {})
        total = sum(tasks.values())
        if not total:
            continue
        rows[agent_id] = {
            "tasks": total,
            "completed": tasks.get("completed", 0),
            "success_rate": f.get("success_rate"),
            "p50_ms": f.get("latency_ms", {}).get("p50"),
            "statuses": tasks,
        }
    return rows


def build(run: DemoRun, figures: Mapping[str, Any], dead: Mapping[str, int]) -> dict[str, Any]:
    failed = [o for o in run.outcomes if not o.ok]
    return {
        "namespace": run.conn.settings.namespace,
        "seconds": round(run.since(), 1),
        "quick": run.quick,
        "requests": sum(1 for o in run.outcomes if o.status is not None),
        "checks": len(run.outcomes),
        "ok": not failed,
        "failed": [dataclasses.asdict(o) for o in failed],
        "agents": agent_rows(figures),
        "dead_letters": dict(dead),
        "facts": run.facts,
        "outcomes": [dataclasses.asdict(o) for o in run.outcomes],
    }


def render(summary: Mapping[str, Any]) -> str:
    """The summary as the terminal shows it."""
    lines = ["", "== Summary", f"{'agent':<18}{'tasks':>6}{'success':>9}{'p50 ms':>9}"]
    for agent_id, row in summary["agents"].items():
        rate = row["success_rate"]
        p50 = row["p50_ms"]
        lines.append(
            f"{agent_id:<18}{row['tasks']:>6}"
            f"{(f'{rate:.0%}' if rate is not None else '-'):>9}"
            f"{(f'{p50:.0f}' if p50 is not None else '-'):>9}"
        )
    dead = ", ".join(f"{r}={n}" for r, n in summary["dead_letters"].items() if n) or "none"
    lines.append(f"dead letters by reason: {dead}")
    for name, value in summary["facts"].items():
        lines.append(f"{name}: {value}")
    total = summary["checks"]
    bad = summary["failed"]
    lines.append(
        f"{summary['requests']} requests, {total} expectations in {summary['seconds']} s: "
        + ("all met" if not bad else f"{len(bad)} NOT met")
    )
    for o in bad:
        lines.append(f"  NOT met [{o['story']}] {o['label']}: {o['detail']}")
    return "\n".join(lines)


__all__ = ["agent_rows", "build", "dead_letters", "render"]
