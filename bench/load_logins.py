"""A worker process of `bench/load.py --access`: agents ``LOAD_AGENTS`` ("START:STOP"), each
on its own connection, logged in as its own broker and Redis user.

Under access control an agent's login is ``worker.<agent_id>`` and a `mesh worker` process has
one login, so hosting 50 agents in one `mesh worker` is not possible; one process per agent
swamps a small host (100 interpreters). This process opens one `MeshConnection` per agent
with that agent's credentials (``LOAD_LOGINS``: a 0600 JSON file, agent_id -> [amqp_url,
redis_url]; absent: every agent on the environment's login) and runs `mesh.services.
start_worker` for each. ``--access off`` runs the same layout without the logins, so the two
meshes differ only by access control. SIGTERM stops the workers (graceful) and exits. Like
`mesh worker`, it runs on uvloop when installed and freezes what its start built.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.load_agents import build_agent, parse_slice  # noqa: E402
from mesh.cli._runner import freeze_start_objects, loop_factory  # noqa: E402
from mesh.config import Settings  # noqa: E402
from mesh.connection import connect  # noqa: E402
from mesh.services import Stop, start_worker  # noqa: E402


def read_logins() -> dict[str, list[str]]:
    path = os.environ.get("LOAD_LOGINS")
    found: dict[str, list[str]] = json.loads(Path(path).read_text()) if path else {}
    return found


async def main() -> None:
    start, stop = parse_slice(os.environ.get("LOAD_AGENTS", "0:1"))
    logins = read_logins()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    stops: list[Stop] = []
    try:
        for k in range(start, stop):
            agent = build_agent(k)
            login = logins.get(agent.agent_id)
            if login is None:
                settings = Settings.from_env()
            else:
                settings = Settings.from_env(amqp_url=login[0], redis_url=login[1])
            conn = await connect(settings, name=f"worker-{agent.agent_id}")
            stops.append(conn.close)
            stops.append(await start_worker(conn, agent, grace_s=5))
        freeze_start_objects()  # as `mesh worker` does once its agents run
        await stopping.wait()
    finally:
        for done in reversed(stops):
            try:
                await done()
            except Exception as exc:  # stop the others anyway
                print(f"stopping: {exc!r}", file=sys.stderr)


if __name__ == "__main__":
    # the loop `mesh worker` runs on (uvloop when installed)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main())
