"""What a process reports as it works: metrics and spans behind one hooks class (habit 11).

`Hooks` has a no-op default for every point a router, a worker or a client reports;
`MetricsHooks` records into `mesh.metrics`, `TracingHooks` opens and annotates
OpenTelemetry spans (`mesh.tracing`), and `hooks_for` composes what a process has, once, at
start. The hot path calls its hooks unconditionally: no ``is None`` per task.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from mesh.schemas import Result, RouteInfo, TaskEnvelope

if TYPE_CHECKING:
    from mesh.metrics.core import Metrics, WatchKind
    from mesh.tracing.spans import Tracing

_NULL: AbstractContextManager[Any] = nullcontext()


class Hooks:
    """Every point a component may report; each default does nothing."""

    # --- any component ---------------------------------------------------------------------
    def attach(self, kind: WatchKind, component: Any) -> None:
        """`component` started (read at scrape time until `detach`)."""

    def detach(self, kind: WatchKind, component: Any) -> None:
        """`component` is closing."""

    def annotate(self, status: str, code: str | None = None) -> None:
        """The current hop's task reached `status` (with an error `code`)."""

    def dead_lettered(self, reason: str) -> None:
        """A body went to ``<ns>.dead.<reason>``."""

    def ended(
        self, status: str, agent_id: str = "", strategy: str = "", created_ms: int | None = None
    ) -> None:
        """A task reached terminal `status` (with its end-to-end time from `created_ms`)."""

    # --- client ----------------------------------------------------------------------------
    def ingress(self, envelope: TaskEnvelope, exchange: str) -> AbstractContextManager[Any]:
        """Around publishing a task to ingress."""
        return _NULL

    def result(self, result: Result, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        """Around handing a Result to its caller."""
        return _NULL

    def relay(self, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        """Around forwarding a worker's Result (publishes carry the hop of `headers`)."""
        return _NULL

    # --- router ----------------------------------------------------------------------------
    def route(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], router_id: str
    ) -> AbstractContextManager[Any]:
        """Around routing one decoded envelope."""
        return _NULL

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo, exchange: str
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

    # --- worker ----------------------------------------------------------------------------
    def handle(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], agent_id: str, instance_id: str
    ) -> AbstractContextManager[Any]:
        """Around claiming, running and settling one delivery."""
        return _NULL

    def handoff(
        self, child: TaskEnvelope, agent_id: str, instance_id: str, budget_ms: int
    ) -> AbstractContextManager[Any]:
        """Around a handler's handoff (publish and wait)."""
        return _NULL

    def started(self, agent_id: str, headers: Mapping[str, Any] | None) -> None:
        """A task starts on an instance."""

    def retried(self, agent_id: str) -> None:
        """A task of `agent_id` went to a retry delay queue."""


class MetricsHooks(Hooks):
    """The Prometheus figures (`mesh.metrics`)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def attach(self, kind: WatchKind, component: Any) -> None:
        self.metrics.watch(kind, component)

    def detach(self, kind: WatchKind, component: Any) -> None:
        self.metrics.unwatch(kind, component)

    def dead_lettered(self, reason: str) -> None:
        self.metrics.dead_lettered(reason)

    def ended(
        self, status: str, agent_id: str = "", strategy: str = "", created_ms: int | None = None
    ) -> None:
        self.metrics.ended(status, agent_id, strategy, created_ms)

    def dispatch_headers(self) -> dict[str, Any] | None:
        from mesh.metrics.core import dispatch_headers

        return dict(dispatch_headers())

    def dispatched(self, agent_id: str, strategy: str, seconds: float) -> None:
        self.metrics.dispatched(agent_id, strategy, seconds)

    def rerouted(self, agent_id: str, reason: str) -> None:
        self.metrics.rerouted(agent_id, reason)

    def started(self, agent_id: str, headers: Mapping[str, Any] | None) -> None:
        self.metrics.started(agent_id, headers)

    def retried(self, agent_id: str) -> None:
        self.metrics.retried(agent_id)


class TracingHooks(Hooks):
    """The spans of every hop (`mesh.tracing`)."""

    def __init__(self, tracing: Tracing) -> None:
        self.tracing = tracing

    def annotate(self, status: str, code: str | None = None) -> None:
        self.tracing.annotate(status=status, code=code)

    def ingress(self, envelope: TaskEnvelope, exchange: str) -> AbstractContextManager[Any]:
        return self.tracing.ingress(envelope, exchange)

    def result(self, result: Result, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        return _as_context(self.tracing.result(result, headers))

    def relay(self, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        return self.tracing.relay(headers)

    def route(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], router_id: str
    ) -> AbstractContextManager[Any]:
        return self.tracing.route(envelope, headers, router_id)

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo, exchange: str
    ) -> AbstractContextManager[Any]:
        return self.tracing.dispatch(envelope, agent_id, route, exchange)

    def chose(self, agent_id: str, route: RouteInfo) -> None:
        self.tracing.chose(agent_id, route)

    def handle(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], agent_id: str, instance_id: str
    ) -> AbstractContextManager[Any]:
        return self.tracing.handle(envelope, headers, agent_id, instance_id)

    def handoff(
        self, child: TaskEnvelope, agent_id: str, instance_id: str, budget_ms: int
    ) -> AbstractContextManager[Any]:
        return self.tracing.handoff(child, agent_id, instance_id, budget_ms)


def _as_context(it: Any) -> AbstractContextManager[Any]:
    """`Tracing.result` is a context manager already; a bare iterator is wrapped."""
    if isinstance(it, AbstractContextManager):
        return it

    @contextmanager
    def wrapped() -> Iterator[None]:
        yield from it

    return wrapped()


class _Both(Hooks):
    """Several hooks, each called in order (context managers nested, the first outermost)."""

    def __init__(self, hooks: Sequence[Hooks]) -> None:
        self.hooks = tuple(hooks)

    def _each(self, name: str, *args: Any) -> None:
        for hook in self.hooks:
            getattr(hook, name)(*args)

    def _nested(self, name: str, *args: Any) -> AbstractContextManager[Any]:
        stack = ExitStack()
        for hook in self.hooks:
            stack.enter_context(getattr(hook, name)(*args))
        return stack

    def attach(self, kind: WatchKind, component: Any) -> None:
        self._each("attach", kind, component)

    def detach(self, kind: WatchKind, component: Any) -> None:
        self._each("detach", kind, component)

    def annotate(self, status: str, code: str | None = None) -> None:
        self._each("annotate", status, code)

    def dead_lettered(self, reason: str) -> None:
        self._each("dead_lettered", reason)

    def ended(
        self, status: str, agent_id: str = "", strategy: str = "", created_ms: int | None = None
    ) -> None:
        self._each("ended", status, agent_id, strategy, created_ms)

    def ingress(self, envelope: TaskEnvelope, exchange: str) -> AbstractContextManager[Any]:
        return self._nested("ingress", envelope, exchange)

    def result(self, result: Result, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        return self._nested("result", result, headers)

    def relay(self, headers: Mapping[str, Any]) -> AbstractContextManager[Any]:
        return self._nested("relay", headers)

    def route(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], router_id: str
    ) -> AbstractContextManager[Any]:
        return self._nested("route", envelope, headers, router_id)

    def dispatch(
        self, envelope: TaskEnvelope, agent_id: str, route: RouteInfo, exchange: str
    ) -> AbstractContextManager[Any]:
        return self._nested("dispatch", envelope, agent_id, route, exchange)

    def dispatch_headers(self) -> dict[str, Any] | None:
        headers: dict[str, Any] = {}
        for hook in self.hooks:
            headers.update(hook.dispatch_headers() or {})
        return headers or None

    def chose(self, agent_id: str, route: RouteInfo) -> None:
        self._each("chose", agent_id, route)

    def dispatched(self, agent_id: str, strategy: str, seconds: float) -> None:
        self._each("dispatched", agent_id, strategy, seconds)

    def rerouted(self, agent_id: str, reason: str) -> None:
        self._each("rerouted", agent_id, reason)

    def handle(
        self, envelope: TaskEnvelope, headers: Mapping[str, Any], agent_id: str, instance_id: str
    ) -> AbstractContextManager[Any]:
        return self._nested("handle", envelope, headers, agent_id, instance_id)

    def handoff(
        self, child: TaskEnvelope, agent_id: str, instance_id: str, budget_ms: int
    ) -> AbstractContextManager[Any]:
        return self._nested("handoff", child, agent_id, instance_id, budget_ms)

    def started(self, agent_id: str, headers: Mapping[str, Any] | None) -> None:
        self._each("started", agent_id, headers)

    def retried(self, agent_id: str) -> None:
        self._each("retried", agent_id)


#: the hooks of a process with neither metrics nor spans
NO_HOOKS = Hooks()


def hooks_for(metrics: Metrics | None, tracing: Tracing | None) -> Hooks:
    """The hooks of one component, chosen once: spans, then metrics, when it has them."""
    chosen: list[Hooks] = []
    if tracing is not None:
        chosen.append(TracingHooks(tracing))
    if metrics is not None:
        chosen.append(MetricsHooks(metrics))
    if not chosen:
        return NO_HOOKS
    return chosen[0] if len(chosen) == 1 else _Both(chosen)


__all__ = ["NO_HOOKS", "Hooks", "MetricsHooks", "TracingHooks", "hooks_for"]
