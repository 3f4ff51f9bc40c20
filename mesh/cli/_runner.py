"""Running long-lived services from the CLI: connect, start, wait for a signal, stop in order."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import signal
import sys
import traceback
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

from mesh.cli._args import UsageError
from mesh.cli._broker import namespace_exists
from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.errors import ConfigError
from mesh.lifecycle import Stopper
from mesh.messaging import login_of
from mesh.worker.agent import Agent

logger = logging.getLogger(__name__)

Starter = Callable[[MeshConnection], Awaitable[Callable[[], Awaitable[None]]]]
LoopFactory = Callable[[], asyncio.AbstractEventLoop]

#: what `mesh worker` error messages suggest
SPEC_EXAMPLE = "e.g. agents.support:refunds or agents.support:*"


def warn_without_access_control(settings: Settings, name: str) -> None:
    """Say once, at start-up, that a service logs in as the broker's shared development
    user: any process that reaches the broker can then act as any agent."""
    if login_of(settings) == "guest":
        logger.warning(
            "%s runs without access control: it logs in to RabbitMQ as 'guest', like every "
            "process of a development mesh, so anyone who reaches the broker can act as any "
            "agent (fine on loopback; see README 'Security' and `mesh access provision`)",
            name,
        )


async def serve(settings: Settings, name: str, starter: Starter) -> int:
    """Connect, run `starter` (which returns its stop coroutine), wait for SIGINT/SIGTERM."""
    conn = await connect(settings, name=name)
    warn_without_access_control(settings, name)
    if not await namespace_exists(conn):
        # the services are what creates a namespace; say so, a mistyped one shows here
        logger.warning(
            "namespace %r does not exist on the broker yet: %s declares it "
            "(check MESH_NAMESPACE if that is unexpected)",
            settings.namespace,
            name,
        )
    stop_event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_event.set)
    try:
        # a signal while starting (a worker waits for a registry to answer) ends the start
        starting = asyncio.ensure_future(starter(conn))
        signalled = asyncio.ensure_future(stop_event.wait())
        await asyncio.wait({starting, signalled}, return_when=asyncio.FIRST_COMPLETED)
        signalled.cancel()
        if not starting.done():
            logger.warning("%s interrupted while starting", name)
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
            return 130
        stop = starting.result()
        freeze_start_objects()
        # one start and one stop line: the namespace, and the connection name the
        # management UI shows for this process (<namespace>/<role>/<host>:<pid>)
        where = f"namespace {settings.namespace}, connection {conn.connection_name}"
        print(f"{name} running ({where}); Ctrl-C to stop", flush=True)
        await stop_event.wait()
        logger.info("%s stopping", name)
        if isinstance(stop, Stopper):
            # a second Ctrl-C ends the grace: a worker hands back what is in flight
            print(f"{name} stopping; Ctrl-C again to stop at once", flush=True)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.hurry)
        await stop()
        print(f"{name} stopped ({where})", flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)
        await conn.close()
    return 0


def freeze_start_objects() -> None:
    """Take what the start built out of the cyclic collector's view: the modules, settings,
    models, agents and snapshots a service keeps for its whole life (`gc.freeze`).

    A full collection otherwise walks all of them again every few seconds under load: in a
    worker process hosting 50 agents that was 8 % of its CPU, 3 % with them frozen. What
    they hold is still freed by reference counting when it is let go; only a cycle among
    frozen objects (the start's own garbage included: no collection runs first, it would
    pause a service that already consumes for ~50 ms) stays until the process ends.
    """
    gc.freeze()


def loop_factory() -> LoopFactory | None:
    """uvloop's loop factory when uvloop is installed, else None (the stdlib loop)."""
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        logger.debug("event loop: asyncio (uvloop is not installed)")
        return None
    logger.debug("event loop: uvloop %s", getattr(uvloop, "__version__", "?"))
    factory: LoopFactory = uvloop.new_event_loop
    return factory


def run_serve(settings: Settings, name: str, starter: Starter) -> int:
    """`serve` on a fresh event loop: uvloop when importable, otherwise asyncio's."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(serve(settings, name, starter))


def put_on_path(app_dir: str | None) -> None:
    """Put `app_dir` (default: the current directory) first on sys.path, as uvicorn does."""
    folder = str(Path(app_dir).resolve()) if app_dir else str(Path.cwd())
    if app_dir and not Path(folder).is_dir():
        raise ConfigError(f"--app-dir {app_dir!r} is not a directory")
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)


def _import(module_name: str) -> Any:
    """Import the agents' module; any error of its import is one line (a usage error: the
    spec names it), never a traceback."""
    try:
        return importlib.import_module(module_name)
    except Exception as exc:  # whatever the module raises while it is imported
        raise UsageError(
            f"cannot import {module_name!r}: {import_error(exc, module_name)}"
        ) from None


def import_error(exc: Exception, module_name: str) -> str:
    """What went wrong importing `module_name`, in one line, with the file and line."""
    missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
    if missing and (module_name == missing or module_name.startswith(f"{missing}.")):
        return (
            f"no module named {missing!r} on the path (run from the app's folder, or "
            "give --app-dir)"
        )
    if isinstance(exc, SyntaxError):
        where = f"{Path(exc.filename or '?').name}, line {exc.lineno}"
        return f"SyntaxError: {exc.msg} ({where})"
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    frames = traceback.extract_tb(exc.__traceback__)
    user = [f for f in frames if "importlib" not in f.filename]
    if user:
        text += f" ({Path(user[-1].filename).name}, line {user[-1].lineno})"
    return text


def load_object(spec: str) -> Any:
    """Import ``module:attribute`` (as in ``mesh worker agents.support:refunds``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"expected MODULE:ATTRIBUTE, got {spec!r} ({SPEC_EXAMPLE})")
    module = _import(module_name)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None


def _agents_in(value: Any, spec: str) -> list[Agent]:
    """`value` as a list of Agents: one Agent, or an iterable holding only Agents."""
    if isinstance(value, Agent):
        return [value]
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigError(f"{spec} is a {type(value).__name__}, not a mesh.Agent or a list of them")
    found = list(value)
    strangers = sorted({type(v).__name__ for v in found if not isinstance(v, Agent)})
    if strangers:
        raise ConfigError(f"{spec} holds {', '.join(strangers)} items, not only mesh.Agent")
    if not found:
        raise ConfigError(f"{spec} is empty: no mesh.Agent to run")
    return found


def _module_agents(module_name: str) -> list[Agent]:
    """Every Agent at module level of `module_name`, and every Agent in its lists/tuples."""
    module = _import(module_name)
    found: list[Agent] = []
    for value in vars(module).values():
        if isinstance(value, Agent):
            found.append(value)
        elif isinstance(value, list | tuple):
            found += [v for v in value if isinstance(v, Agent)]
    if not found:
        raise ConfigError(f"module {module_name!r} defines no mesh.Agent at module level")
    return found


def load_agents(specs: Iterable[str]) -> list[Agent]:
    """The agents named by ``module:attribute`` / ``module:*`` specs, each once, in order."""
    agents: list[Agent] = []
    seen: set[int] = set()
    for spec in specs:
        module_name, _, attr = spec.partition(":")
        if module_name and attr == "*":
            found = _module_agents(module_name)
        else:
            found = _agents_in(load_object(spec), spec)
        for agent in found:
            if id(agent) not in seen:
                seen.add(id(agent))
                agents.append(agent)
    counts = Counter(a.agent_id for a in agents)
    twice = sorted(i for i, n in counts.items() if n > 1)
    if twice:
        raise ConfigError(f"agent id(s) {', '.join(twice)} named by more than one Agent")
    return agents
