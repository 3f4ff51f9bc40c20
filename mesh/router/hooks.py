"""What a router reports as it routes: metrics and spans behind one hooks class (habit 11).

`RouterHooks` has a no-op default for every point of the router's path; `MetricsHooks`
records into `mesh.metrics`, `TracingHooks` opens and annotates OpenTelemetry spans, and
`hooks_for` composes what a process has once, at start. The router's steps call their
hooks unconditionally: there is no ``is None`` on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from typing import TYPE_CHECKING, Any

from schemas import RouteInfo, TaskEnvelope

if TYPE_CHECKING:
    from mesh.metrics.core import Metrics
    from mesh.tracing.spans import Tracing

_NULL: AbstractContextManager[Any] = nullcontext()


class RouterHooks:
    """Every point of a router's path a hook may observe; each default does nothing."""

    def attach(self, router: Any) -> None:
        """The router started (read at scrape time until `detach`)."""

    def detach(self, router: Any) -> None:
        """The router is closing."""

    def route(self, envelope: TaskEnvelope, headers: dict[str, Any]) -> AbstractContextManager[Any]:
        """Around routing one decoded envelope."""
        return _NULL

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo
    ) -> AbstractContextManager[Any]:
        """Around publishing a dispatch (and choosing again when its key is unbound)."""
        return _NULL

    def dispatch_headers(self) -> dict[str, Any] | None:
        """Headers to stamp on a dispatch (None: none)."""
        return None

    def chose(self, agent_id: str, route: RouteInfo) -> None:
        """Another agent was chosen after an unbound dispatch."""

    def dispatched(self, agent_id: str, strategy: str, seconds: float) -> None:
        """A dispatch was confirmed, `seconds` after the task was received."""

    def rerouted(self, agent_id: str, reason: str) -> None:
        """A dispatch to `agent_id` came back (or found its key unbound)."""

    def ended(self, status: str, code: str) -> None:
        """The router ended a task itself with `status` and error `code`."""

    def dead_lettered(self, reason: str) -> None:
        """A body went to ``<ns>.dead.<reason>``."""


class MetricsHooks(RouterHooks):
    """The router's Prometheus figures (`mesh.metrics`)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def attach(self, router: Any) -> None:
        self.metrics.watch("router", router)

    def detach(self, router: Any) -> None:
        self.metrics.unwatch("router", router)

    def dispatch_headers(self) -> dict[str, Any] | None:
        from mesh.metrics.core import dispatch_headers

        return dict(dispatch_headers())

    def dispatched(self, agent_id: str, strategy: str, seconds: float) -> None:
        self.metrics.dispatched(agent_id, strategy, seconds)

    def rerouted(self, agent_id: str, reason: str) -> None:
        self.metrics.rerouted(agent_id, reason)

    def ended(self, status: str, code: str) -> None:
        self.metrics.ended(status)

    def dead_lettered(self, reason: str) -> None:
        self.metrics.dead_lettered(reason)


class TracingHooks(RouterHooks):
    """The ``mesh.route`` and ``mesh.dispatch`` spans (`mesh.tracing`)."""

    def __init__(self, tracing: Tracing, router_id: str, exchange: str) -> None:
        self.tracing = tracing
        self.router_id = router_id
        self.exchange = exchange

    def route(self, envelope: TaskEnvelope, headers: dict[str, Any]) -> AbstractContextManager[Any]:
        return self.tracing.route(envelope, headers, self.router_id)

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo
    ) -> AbstractContextManager[Any]:
        return self.tracing.dispatch(envelope, agent_id, route, self.exchange)

    def chose(self, agent_id: str, route: RouteInfo) -> None:
        self.tracing.chose(agent_id, route)

    def ended(self, status: str, code: str) -> None:
        self.tracing.annotate(status=status, code=code)


class _Both(RouterHooks):
    """Several hooks, each called in order (context managers nested, the first outermost)."""

    def __init__(self, hooks: Sequence[RouterHooks]) -> None:
        self.hooks = tuple(hooks)

    def attach(self, router: Any) -> None:
        for hook in self.hooks:
            hook.attach(router)

    def detach(self, router: Any) -> None:
        for hook in self.hooks:
            hook.detach(router)

    def route(self, envelope: TaskEnvelope, headers: dict[str, Any]) -> AbstractContextManager[Any]:
        stack = ExitStack()
        for hook in self.hooks:
            stack.enter_context(hook.route(envelope, headers))
        return stack

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo
    ) -> AbstractContextManager[Any]:
        stack = ExitStack()
        for hook in self.hooks:
            stack.enter_context(hook.dispatch(envelope, agent_id, route))
        return stack

    def dispatch_headers(self) -> dict[str, Any] | None:
        headers: dict[str, Any] = {}
        for hook in self.hooks:
            headers.update(hook.dispatch_headers() or {})
        return headers or None

    def chose(self, agent_id: str, route: RouteInfo) -> None:
        for hook in self.hooks:
            hook.chose(agent_id, route)

    def dispatched(self, agent_id: str, strategy: str, seconds: float) -> None:
        for hook in self.hooks:
            hook.dispatched(agent_id, strategy, seconds)

    def rerouted(self, agent_id: str, reason: str) -> None:
        for hook in self.hooks:
            hook.rerouted(agent_id, reason)

    def ended(self, status: str, code: str) -> None:
        for hook in self.hooks:
            hook.ended(status, code)

    def dead_lettered(self, reason: str) -> None:
        for hook in self.hooks:
            hook.dead_lettered(reason)


def hooks_for(
    metrics: Metrics | None, tracing: Tracing | None, router_id: str, exchange: str
) -> RouterHooks:
    """The hooks of one router, chosen once: metrics and spans when the process has them."""
    chosen: list[RouterHooks] = []
    if tracing is not None:
        chosen.append(TracingHooks(tracing, router_id, exchange))
    if metrics is not None:
        chosen.append(MetricsHooks(metrics))
    if not chosen:
        return RouterHooks()
    return chosen[0] if len(chosen) == 1 else _Both(chosen)


__all__ = ["MetricsHooks", "RouterHooks", "TracingHooks", "hooks_for"]
