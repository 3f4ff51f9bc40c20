"""`mesh router`, `mesh worker SPEC [SPEC ...]`: the long-lived processes of the mesh."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mesh.cli._args import identifier, int_range, positive_float, require_router_stack
from mesh.cli._runner import SPEC_EXAMPLE, load_agents, put_on_path, run_serve
from mesh.cli.health import add_check_flag, probe
from mesh.config import Settings
from mesh.connection import MeshConnection
from mesh.distribution import extra_hint
from mesh.errors import ConfigError
from mesh.lifecycle import Stopper
from mesh.metrics.core import Metrics
from mesh.metrics.http import serve_metrics
from mesh.worker.agent import Agent

logger = logging.getLogger(__name__)

Stop = Callable[[], Awaitable[None]]


def register(sub: Any) -> None:
    p = sub.add_parser("router", help="run a router (competing consumer of the ingress queue)")
    add_check_flag(p, "router")
    p.set_defaults(func=_router)
    p = sub.add_parser(
        "worker",
        help="run agents as queue workers in one process: mesh worker MODULE:AGENT [...]",
    )
    p.add_argument(
        "agents",
        nargs="+",
        metavar="SPEC",
        help=(
            "MODULE:ATTRIBUTE naming a mesh.Agent or a list of them, or MODULE:* for every "
            f"Agent of the module ({SPEC_EXAMPLE})"
        ),
    )
    p.add_argument(
        "--app-dir", default=None, help="directory put first on sys.path (default: the cwd)"
    )
    p.add_argument(
        "--concurrency",
        type=int_range(1),
        default=None,
        help="max_concurrency of every hosted agent (default: each Agent's own)",
    )
    p.add_argument(
        "--instance-id",
        type=identifier,
        default=None,
        help="the instance's id (default: <agent_id>-<random>); one agent only",
    )
    p.add_argument(
        "--grace-s",
        type=positive_float,
        default=30.0,
        help="seconds in-flight tasks get to finish on shutdown (default 30)",
    )
    p.add_argument(
        "--reload",
        action="store_true",
        help="development: restart the worker when a .py file under --app-dir changes "
        f"(needs watchfiles: {extra_hint('reload')})",
    )
    add_check_flag(p, "worker")
    p.set_defaults(func=_worker)


async def with_metrics(
    settings: Settings, role: str, start: Callable[[Metrics | None], Awaitable[Stop]]
) -> Stop:
    """`start` a service with the ``/metrics`` endpoint its settings ask for
    (``MESH_METRICS_PORT``; its URL is printed); the stop returned closes both."""
    endpoint = await serve_metrics(settings, role)
    if endpoint is None:
        return await start(None)
    try:
        stop = await start(endpoint.metrics)
    except BaseException:
        await endpoint.close()
        raise
    print(f"{role} metrics on {endpoint.url}", flush=True)

    async def stop_both() -> None:
        try:
            await stop()
        finally:
            await endpoint.close()

    return Stopper.around(stop, stop_both)


def _router(args: argparse.Namespace, settings: Settings) -> int:
    if args.check:
        return probe(settings, "router", [])
    require_router_stack()
    from mesh.services import start_router

    async def starter(conn: MeshConnection) -> Stop:
        return await with_metrics(settings, "router", lambda m: start_router(conn, metrics=m))

    return run_serve(settings, "mesh-router", starter)


def worker_agents(
    specs: Sequence[str],
    *,
    app_dir: str | None = None,
    concurrency: int | None = None,
    instance_id: str | None = None,
) -> list[Agent]:
    """The agents `mesh worker` hosts, with the command line's overrides applied."""
    if concurrency is not None and concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
    put_on_path(app_dir)
    agents = load_agents(specs)
    if instance_id is not None and len(agents) != 1:
        raise ConfigError(
            f"--instance-id needs exactly one agent, but {' '.join(specs)} names {len(agents)}"
        )
    if concurrency is not None:
        agents = [dataclasses.replace(a, max_concurrency=concurrency) for a in agents]
    return agents


async def start_workers(
    conn: MeshConnection,
    agents: Sequence[Agent],
    instance_id: str | None,
    grace_s: float,
    metrics: Metrics | None = None,
) -> Stop:
    """One worker runtime per agent on `conn`; the stop drains them in reverse order."""
    from mesh.services import start_worker

    stops: list[Stop] = []

    async def stop_all() -> None:
        for stop in reversed(stops):
            await stop()

    def hurry_all() -> None:
        for stop in stops:
            if isinstance(stop, Stopper):
                stop.hurry()

    try:
        for agent in agents:
            stops.append(
                await start_worker(
                    conn, agent, instance_id=instance_id, grace_s=grace_s, metrics=metrics
                )
            )
    except BaseException:
        await stop_all()
        raise
    logger.info("hosting %d agent(s)", len(stops))
    return Stopper(stop_all, hurry_all)


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    if args.reload and not args.check:
        from mesh.cli.reload import run_with_reload

        return run_with_reload(args)
    agents = worker_agents(
        args.agents,
        app_dir=args.app_dir,
        concurrency=args.concurrency,
        instance_id=args.instance_id,
    )
    if args.check:
        return probe(settings, "worker", [a.agent_id for a in agents], args.instance_id)

    async def starter(conn: MeshConnection) -> Stop:
        return await with_metrics(
            settings,
            "worker",
            lambda m: start_workers(conn, agents, args.instance_id, args.grace_s, m),
        )

    name = f"mesh-worker-{agents[0].agent_id}"
    if len(agents) > 1:
        name += f"+{len(agents) - 1}"
    return run_serve(settings, name, starter)
