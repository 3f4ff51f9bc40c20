"""`RouterSettler`: the router queue's settle policy, the only router code that acks or nacks.

It is `mesh.wire.AckBatched` (a delivery handled is acked in a batch; an outage holds it a
moment, longer while the outage lasts, then requeues it: the task records make the second
pass safe; a shutdown requeues it) with the router's own answer to a bug: the body's
caller is answered with ``router_error`` when its reply route allows it, and the body is
dead-lettered as ``unroutable`` with "router internal error", then acked. A bug must
neither stop the router nor lose the task, nor leave its caller waiting in silence.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aio_pika.abc import AbstractIncomingMessage

from mesh.wire import AckBatched

if TYPE_CHECKING:
    from mesh.router.endings import Endings


class RouterSettler(AckBatched):
    def __init__(self, endings: Endings) -> None:
        super().__init__("tasks", on_bug=self._bug)
        self.endings = endings
        #: deliveries handled to the end
        self.handled = 0

    async def done(self, message: AbstractIncomingMessage) -> None:
        self.handled += 1
        await super().done(message)

    async def _bug(self, message: AbstractIncomingMessage, exc: Exception) -> None:
        await self.endings.broken(
            message.body, message.reply_to, message.correlation_id, message.user_id
        )


__all__ = ["RouterSettler"]
