"""`mesh demo`: the whole mesh in one process, routing a few requests to a support team.

Starts the registry, a router and the agents of `agents.support`, waits until the router
sees every agent, then sends requests in English and Chinese and prints where each went.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any

from mesh.cli._args import require_router_stack
from mesh.cli._runner import put_on_path
from mesh.client import MeshClient
from mesh.config import Settings
from mesh.connection import connect
from mesh.errors import ConfigError

#: the example agents the demo runs (in the repository, not installed with the library)
DEMO_MODULE = "agents/support.py"

REQUESTS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("I'd like to send back the headphones I bought, they are broken", {"order_id": "A-1001"}),
    ("where is my parcel? it was due yesterday", {"order_id": "A-1002"}),
    ("这款耳机有降噪功能吗", {}),
    ("我要退货，尺码不合适", {"order_id": "A-1003"}),
    ("tell me a joke about penguins", {}),
)


def register(sub: Any) -> None:
    p = sub.add_parser("demo", help="run the mesh in one process and route a few requests")
    p.add_argument(
        "--namespace",
        default=None,
        help="namespace to run in (default: demo-<time>, created and cleaned up after)",
    )
    p.add_argument(
        "--app-dir",
        default=None,
        help="the repository holding agents/support.py (default: the current directory, "
        "else the checkout mesh runs from)",
    )
    p.set_defaults(func=_run)


def demo_dir(app_dir: str | None) -> str:
    """Where `agents.support` is imported from: `app_dir`, the cwd, or mesh's own checkout."""
    if app_dir is not None:
        return app_dir
    checkout = Path(__file__).resolve().parents[2]
    for folder in (Path.cwd(), checkout):
        if (folder / DEMO_MODULE).is_file():
            return str(folder)
    raise ConfigError(
        f"mesh demo runs the example agents of the repository ({DEMO_MODULE}): run it from "
        "the repository root or pass --app-dir"
    )


def _run(args: argparse.Namespace, settings: Settings) -> int:
    require_router_stack()
    put_on_path(demo_dir(args.app_dir))
    namespace = args.namespace or f"demo-{int(time.time())}"
    settings = settings.model_copy(update={"namespace": namespace})
    return asyncio.run(_demo(settings))


async def _demo(settings: Settings) -> int:
    from agents.support import TEAM, helpdesk
    from mesh.services import start_mesh

    print(f"demo: namespace {settings.namespace}; loading the embedding model...", flush=True)
    settings = settings.model_copy(update={"fallback_agent": helpdesk.agent_id})
    async with await connect(settings, name="mesh-demo") as conn:
        stop = await start_mesh(conn, TEAM, wait_agents=[a.agent_id for a in TEAM])
        failures = 0
        try:
            async with MeshClient(conn) as client:
                for text, payload in REQUESTS:
                    result = await client.request(text, payload, timeout_ms=15_000)
                    route = result.route
                    how = (
                        f"{route.strategy} score={route.score:.3f}"
                        f"{' low_confidence' if route.low_confidence else ''}"
                        if route is not None and route.score is not None
                        else (route.strategy if route else "-")
                    )
                    print(f"\n> {text}")
                    print(f"  -> {result.agent_id} [{how}] {result.status}: {result.output}")
                    failures += result.status != "completed"
        finally:
            await stop()
    await _cleanup(settings)
    print("\ndemo: done" + (f" ({failures} request(s) not completed)" if failures else ""))
    return 1 if failures else 0


async def _cleanup(settings: Settings) -> None:
    from mesh.management import Management

    await asyncio.to_thread(Management(settings).purge_namespace, settings.namespace)
    async with await connect(settings, name="mesh-demo-cleanup") as conn:
        keys = [k async for k in conn.redis.scan_iter(match=conn.keys.pattern())]
        if keys:
            await conn.redis.delete(*keys)
