"""Running long-lived services from the CLI: connect, start, wait for a signal, stop in order."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from mesh.config import Settings
from mesh.connection import MeshConnection, connect
from mesh.errors import ConfigError

logger = logging.getLogger(__name__)

Starter = Callable[[MeshConnection], Awaitable[Callable[[], Awaitable[None]]]]


async def serve(settings: Settings, name: str, starter: Starter) -> int:
    """Connect, run `starter` (which returns its stop coroutine), wait for SIGINT/SIGTERM."""
    conn = await connect(settings, name=name)
    stop_event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_event.set)
    try:
        stop = await starter(conn)
        print(f"{name} running (namespace {settings.namespace}); Ctrl-C to stop", flush=True)
        await stop_event.wait()
        logger.info("%s stopping", name)
        await stop()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError, RuntimeError):
                loop.remove_signal_handler(sig)
        await conn.close()
    return 0


def load_object(spec: str) -> Any:
    """Import ``module:attribute`` (as in ``mesh worker agents.support:refund``)."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"expected MODULE:ATTRIBUTE, got {spec!r} (e.g. agents.support:refund)")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"cannot import {module_name!r}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
