"""`mesh agents`: agents and their instances as the registry holds them (from Redis).

One row per instance: status (idle / busy / down; a lapsed lease is down), load, fencing
token and the age of its last heartbeat, by Redis' clock. ``--json`` prints the same data.
``--schemas`` prints each agent's contract instead: the JSON Schemas of its payload and
output (`Agent(input_model=...)`; none: the agent declared no contract).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from mesh.config import Settings
from mesh.connection import connect
from mesh.registry.state import AgentState, load_state
from mesh.schemas.codec import dumps


def register(sub: Any) -> None:
    p = sub.add_parser("agents", help="list agents and their instances (status, load, token)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--live", action="store_true", help="only live instances")
    p.add_argument(
        "--schemas",
        action="store_true",
        help="print each agent's contract (input and output JSON Schemas) instead",
    )
    p.set_defaults(func=_agents)


def contracts(agents: dict[str, AgentState]) -> dict[str, dict[str, Any]]:
    """Each registered agent's input and output schema (None: not declared)."""
    found: dict[str, dict[str, Any]] = {}
    for agent_id in sorted(agents):
        registration = agents[agent_id].registration
        if registration is not None:
            found[agent_id] = {
                "input_schema": registration.input_schema,
                "output_schema": registration.output_schema,
            }
    return found


def rows(
    agents: dict[str, AgentState], now_ms: int, *, live_only: bool = False
) -> list[dict[str, Any]]:
    """One JSON-ready row per instance, agents by id, instances by id."""
    out: list[dict[str, Any]] = []
    for agent_id in sorted(agents):
        agent = agents[agent_id]
        for iid in sorted(agent.instances):
            inst = agent.instances[iid]
            if live_only and not inst.is_live(now_ms):
                continue
            out.append(
                {
                    "agent_id": agent_id,
                    "instance_id": iid,
                    "status": inst.display_status(now_ms),
                    "in_flight": inst.in_flight,
                    "max_concurrency": inst.max_concurrency,
                    "stuck": inst.stuck,
                    "token": inst.token,
                    "heartbeat_age_s": round((now_ms - inst.last_heartbeat_ms) / 1000, 1),
                    "lease_left_s": round((inst.lease_expires_ms - now_ms) / 1000, 1),
                    "version": inst.version,
                    "down_reason": inst.down_reason,
                    "agent_load": agent.load(now_ms),
                    "agent_capacity": agent.capacity(now_ms),
                }
            )
    return out


def render_table(table: list[dict[str, Any]]) -> str:
    if not table:
        return "no agents registered"
    header = ["AGENT", "INSTANCE", "STATUS", "LOAD", "TOKEN", "HEARTBEAT", "AGENT LOAD"]
    lines = [header]
    for r in table:
        lines.append(
            [
                r["agent_id"],
                r["instance_id"],
                _status(r),
                f"{r['in_flight']}/{r['max_concurrency']}",
                str(r["token"]),
                f"{r['heartbeat_age_s']:.1f}s ago",
                f"{r['agent_load']}/{r['agent_capacity']}",
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def _status(row: dict[str, Any]) -> str:
    if row["status"] == "down" and row["down_reason"]:
        return f"down ({row['down_reason']})"
    if row["status"] == "stuck":
        return f"stuck ({row['stuck']} unsettled)"
    return str(row["status"])


async def _state(settings: Settings) -> tuple[dict[str, AgentState], int]:
    async with await connect(settings, name="mesh-agents") as conn:
        seconds, micros = await conn.redis.time()
        now = int(seconds) * 1000 + int(micros) // 1000
        state = await load_state(conn.redis, conn.keys, prune=not conn.settings.access_control)
        return state, now


async def collect(settings: Settings, *, live_only: bool = False) -> list[dict[str, Any]]:
    state, now = await _state(settings)
    return rows(state, now, live_only=live_only)


def _agents(args: argparse.Namespace, settings: Settings) -> int:
    if args.schemas:
        state, _now = asyncio.run(_state(settings))
        print(dumps(contracts(state)).decode())
        return 0
    table = asyncio.run(collect(settings, live_only=args.live))
    if args.json:
        print(dumps(table).decode())
    else:
        print(render_table(table))
    return 0
