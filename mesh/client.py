"""`MeshClient`: publish task envelopes to `mesh.ingress` and await their Results.

Results come back on a reply queue owned by the client (named, durable, expiring once
abandoned), so Results survive a broker restart and a robust reconnect resumes it.
Several requests can be in flight at once; each waits on its own future, keyed by task_id.

Results are published at least once: a publish whose confirm was lost in a broker outage
is sent again, and a redelivered task is answered from its stored Result. The client hands
a Result to the requests waiting for its task and drops a copy nobody waits for any more
(`duplicate_results`); a copy that disagrees with the first (another status or output)
would mean a task ran twice and is counted in `conflicting_results` and logged.

A task no agent scored above the threshold for, while no fallback agent is configured, is
handed to a person (degradation level 2): `request` returns the interim Result of status
``queued_for_human`` at once (the caller decides whether to wait), and the person's answer
comes later on the same reply queue as long as it exists: `final_result(task_id)` returns
it (kept here if it came first, up to `ANSWERED_MEMORY` of them). It is stored with the
task either way (`mesh task TASK_ID`).

A request needs a router: before publishing, the client asks the broker whether one
consumes the router queue (`mesh.router_watch`, a count above zero believed for 3 s) and,
while a request waits, asks again every `ROUTER_RECHECK_S`. With none, a task that one of
the caller's local rules (`mesh.local_rules`) matches goes straight to that rule's agent
(``route.strategy="local_rule"``); any other fails with `NoRouter` once the broker said
"none" for a second in a row (a router failing over is uncounted for a moment), instead of
waiting out its timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from aio_pika.abc import AbstractChannel, AbstractIncomingMessage, AbstractQueue
from aiormq.exceptions import PublishError

from mesh.access.roles import AccessScope, Role
from mesh.connection import MeshConnection
from mesh.errors import NoRouter, NotStarted, RequestTimeout
from mesh.hooks import NO_HOOKS, Hooks, hooks_for
from mesh.lifecycle import Lifecycle
from mesh.local_rules import LocalRules, rules_for
from mesh.messaging import Publisher
from mesh.retrying import PUBLISH_RETRY_S, TRANSIENT_ERRORS, with_retries
from mesh.router_watch import RouterWatch
from mesh.schemas import InvalidEnvelope, Result, RouteInfo, TaskEnvelope, decode, new_id, now_ms
from mesh.wire import AckAfter, Subscriber

logger = logging.getLogger(__name__)

#: an abandoned reply queue (its client gone without closing) is removed after this
REPLY_QUEUE_EXPIRES_MS = 600_000
#: how many answered task ids the client remembers to recognise a Result sent twice
ANSWERED_MEMORY = 10_000
#: while a request waits, how often the client looks for a router again
ROUTER_RECHECK_S = 1.5
#: a waiting request fails with `NoRouter` once every look for this long found no router
#: and ingress messages waiting: longer than a router's failover to another cluster node or
#: its restart in a deploy, which a waiting request must outlive (its task is routed then)
ROUTERLESS_S = 20.0
#: how `route.strategy` marks a task a local rule sent
LOCAL_RULE_ROUTE = RouteInfo(strategy="local_rule")


class MeshClient(Lifecycle):
    """Send tasks to the mesh: ``async with MeshClient(conn) as client: await client.request()``."""

    def __init__(
        self,
        conn: MeshConnection,
        *,
        client_id: str | None = None,
        on_result: Callable[[Result], None] | None = None,
        local_rules: Mapping[str, str] | LocalRules | None = None,
        wait_for_router: bool = False,
    ) -> None:
        """`local_rules`: ``{pattern: agent_id}`` followed when no router consumes ingress
        (default: the file ``MESH_LOCAL_RULES`` names, read by `start()`; none: `NoRouter`).
        `wait_for_router`: never look for a router; with none, a request's task waits in
        the router queue and the request until its timeout (a test playing the router)."""
        self.conn = conn
        #: called with every Result this client accepts, copies included, before it is
        #: handed to the waiting requests (load and fault benches record arrivals with it)
        self.on_result = on_result
        self.settings = conn.settings
        self.topology = conn.topology
        self.client_id = client_id or new_id()[:16]
        self.publisher = Publisher(conn)
        self._replies = Subscriber(
            conn, self._declare_reply_queue, self._on_result, AckAfter("Results"), prefetch=256
        )
        self._reply_queue: AbstractQueue | None = None
        self._waiters: dict[str, list[asyncio.Future[Result]]] = {}
        #: tasks handed to a person (interim Result seen), and their answers that came
        #: with nobody waiting yet (`final_result`)
        self._with_people: OrderedDict[str, Result | None] = OrderedDict()
        self._final_waiters: dict[str, list[asyncio.Future[Result]]] = {}
        #: how long `submit` keeps retrying through a broker outage
        self.publish_retry_s = PUBLISH_RETRY_S
        #: Results handed to waiting requests; copies nobody waited for are
        #: `duplicate_results`
        self.results_received = 0
        self.duplicate_results = 0
        self.conflicting_results = 0
        #: Results dropped because a router did not send them (under access control only a
        #: router's user answers callers; anyone else's Result is a forgery)
        self.forged_results = 0
        #: the user a Result must come from (None: anyone, without access control)
        self.trusted_sender = (
            AccessScope.from_settings(conn.settings).user(Role("router"))
            if conn.settings.access_control
            else None
        )
        #: queue name part: ``<login>.<client_id>``, so the user owns it by its name
        self.queue_id = f"{self.publisher.login}.{self.client_id}"
        self._answered: OrderedDict[str, tuple[Any, ...]] = OrderedDict()
        #: the client's spans once started (`mesh.hooks`)
        self.hooks: Hooks = NO_HOOKS
        #: whether a router consumes the router queue (cached a few seconds)
        self.watch = RouterWatch(conn)
        self.wait_for_router = wait_for_router
        self._given_rules = local_rules
        #: where tasks go while no router runs (set by `start()`)
        self.local_rules = LocalRules()
        #: tasks a local rule sent straight to an agent
        self.sent_by_rule = 0
        #: when (loop clock) the last Result of a task a router routed came: proof that
        #: routing works whatever the broker's consumer count says
        self._routed_result_at = float("-inf")
        #: whether the last look found no router with ingress messages waiting (logged once)
        self._routerless = False

    @property
    def reply_to(self) -> str:
        if self._reply_queue is None:
            raise NotStarted("MeshClient.start() was not awaited")
        return self._reply_queue.name

    async def start(self) -> MeshClient:
        if self._reply_queue is not None:
            return self
        self.local_rules = rules_for(self._given_rules, self.settings, self.topology)
        await self.publisher.start()
        self.hooks = hooks_for(None, self.publisher.tracing)
        await self.topology.declare(self.publisher.channel)
        await self._replies.start()
        self._reply_queue = self._replies.queue
        return self

    async def _declare_reply_queue(self, channel: AbstractChannel) -> AbstractQueue:
        # durable, not exclusive: Results published while the broker restarts (or before
        # this client has reconnected) wait in it; x-expires removes it once abandoned
        # in quorum mode it is a quorum queue too: a classic one lives on one node, and
        # with that node gone its Results are dropped and the client cannot reconnect
        arguments: dict[str, Any] = {"x-expires": REPLY_QUEUE_EXPIRES_MS}
        if self.topology.queue_type == "quorum":
            arguments["x-queue-type"] = "quorum"
        queue = await channel.declare_queue(
            self.topology.reply_queue(self.queue_id), durable=True, arguments=arguments
        )
        # Results come through the replies exchange, keyed by this queue (never through
        # the default exchange, which would let a router write any queue)
        key = self.topology.reply_key(queue.name)
        await queue.bind(self.topology.replies, routing_key=key)
        return queue

    async def _on_result(self, message: AbstractIncomingMessage) -> None:
        """Take one Result off the reply queue (acked once this returns)."""
        if self.trusted_sender is not None and message.user_id != self.trusted_sender:
            self.forged_results += 1
            logger.warning(
                "Result from user %r dropped: only a router (%s) answers under access control",
                message.user_id,
                self.trusted_sender,
            )
            return
        try:
            result = decode(Result, message.body)
        except InvalidEnvelope:
            logger.warning(
                "unreadable result on %s dropped: %r", message.body[:200], self.client_id
            )
            return
        if self.on_result is not None:
            self.on_result(result)
        with self.hooks.result(result, message.headers or {}):
            self._hand_over(result)

    def _hand_over(self, result: Result) -> None:
        """Give `result` to the requests waiting for its task (or count a copy)."""
        if result.status == "queued_for_human":
            self._interim(result)
            return
        if result.route is None or result.route.strategy != LOCAL_RULE_ROUTE.strategy:
            self._routed_result_at = asyncio.get_running_loop().time()
        seen = self._remember(result)
        waiters = self._waiters.pop(result.task_id, [])
        waiters += self._final_waiters.pop(result.task_id, [])
        if not waiters and result.task_id in self._with_people:
            self._with_people[result.task_id] = result  # for a later `final_result`
            logger.info("task_id=%s: the person's answer came (final_result)", result.task_id)
            self.results_received += 1
            return
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(result)
            self.results_received += 1
        elif seen:
            self.duplicate_results += 1
            logger.info("second copy of the Result of task_id=%s dropped", result.task_id)
        else:
            logger.info("Result for task_id=%s has no waiter; dropped", result.task_id)

    def _interim(self, result: Result) -> None:
        """An interim ``queued_for_human`` Result: to the waiting requests, not remembered
        as the task's Result (the person's answer is)."""
        for fut in self._waiters.pop(result.task_id, []):
            if not fut.done():
                fut.set_result(result)
        if result.task_id not in self._with_people:
            self._with_people[result.task_id] = None
            if len(self._with_people) > ANSWERED_MEMORY:
                self._with_people.popitem(last=False)

    async def final_result(self, task_id: str, *, wait_s: float) -> Result:
        """The terminal Result of a task whose request returned ``queued_for_human``: the
        person's answer (`mesh human answer`), at once if it came already.

        Raises:
            RequestTimeout: no answer within `wait_s` (it stays stored with the task).
        """
        late = self._with_people.get(task_id)
        if late is not None:
            return late
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._final_waiters.setdefault(task_id, []).append(fut)
        try:
            return await asyncio.wait_for(fut, wait_s)
        except TimeoutError:
            raise RequestTimeout(
                f"no answer of a person for task_id={task_id} within {wait_s:.1f}s; it is "
                "stored with the task when it comes (`mesh task`)"
            ) from None
        finally:
            waiters = self._final_waiters.get(task_id, [])
            if fut in waiters:
                waiters.remove(fut)
            if not waiters:
                self._final_waiters.pop(task_id, None)

    def _remember(self, result: Result) -> bool:
        """Whether a Result for this task came before; a different one is a conflict."""
        gist = (
            result.status,
            result.output,
            result.error.code if result.error else None,
            result.agent_id,
        )
        first = self._answered.get(result.task_id)
        if first is None:
            self._answered[result.task_id] = gist
            if len(self._answered) > ANSWERED_MEMORY:
                self._answered.popitem(last=False)
            return False
        if first != gist:
            self.conflicting_results += 1
            logger.error(
                "task_id=%s answered twice with different Results: %s, then %s",
                result.task_id,
                first[0],
                gist[0],
            )
        return True

    async def submit(self, envelope: TaskEnvelope) -> TaskEnvelope:
        """Publish `envelope` (with confirm) to ingress without waiting; returns what was
        sent. No router is looked for: with none, the task waits in the router queue."""
        if envelope.reply_to is None:
            envelope = envelope.model_copy(update={"reply_to": self.reply_to})
        # through a broker outage the publish is retried until the connection is back; a
        # publish confirmed but reported lost is sent twice, which the router absorbs
        # (same task_id: one execution, the same Result)
        sent = envelope
        published = with_retries(
            lambda: self.publisher.publish_envelope(
                self.topology.ingress,
                self.topology.ingress_band_key(sent.priority),
                sent,
                mandatory=True,
            ),
            self.publish_retry_s,
        )
        with self.hooks.ingress(sent, self.topology.ingress):
            await published
        return envelope

    async def request(
        self,
        capability: str,
        payload: dict[str, Any] | None = None,
        *,
        wait_s: float | None = None,
        **fields: Any,
    ) -> Result:
        """Send a task and wait for its Result.

        `fields` are any other envelope fields (target, priority, timeout_ms, required_tags,
        task_id, trace_id...). The wait ends at the task's timeout plus a margin, or `wait_s`.

        A Result of status ``queued_for_human`` is interim: the task waits for a person,
        whose answer `final_result` returns later.

        Raises:
            pydantic.ValidationError: a field is out of bounds.
            RequestTimeout: no Result arrived in time.
            NoRouter: no router consumes ingress and no local rule takes the task.
        """
        envelope = TaskEnvelope(capability=capability, payload=payload or {}, **fields)
        return await self.send(envelope, wait_s=wait_s)

    async def send(self, envelope: TaskEnvelope, *, wait_s: float | None = None) -> Result:
        """Publish a ready envelope and wait for its Result."""
        if self._reply_queue is None:
            raise NotStarted("MeshClient.start() was not awaited")
        fut: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(envelope.task_id, []).append(fut)
        try:
            sent = await self._publish(envelope)
            limit = wait_s if wait_s is not None else sent.timeout_ms / 1000.0 + 5.0
            return await self._wait(sent, fut, limit)
        finally:
            waiters = self._waiters.get(envelope.task_id)
            if waiters is not None and fut in waiters:
                waiters.remove(fut)
                if not waiters:
                    del self._waiters[envelope.task_id]

    async def _publish(self, envelope: TaskEnvelope) -> TaskEnvelope:
        """To ingress while a router consumes it (or the broker does not say), else to the
        agent of the first local rule matching the capability text.

        Raises:
            NoRouter: no router, and no local rule takes the task (nothing was published).
        """
        if self.wait_for_router or await self.watch.routers() != 0:
            return await self.submit(envelope)
        if not await self.watch.absent():  # a router failing over is back, or unknown
            return await self.submit(envelope)
        agent_id = self.local_rules.match(envelope.capability)
        if agent_id is None:
            reason = " and no local rule matches its text" if self.local_rules else ""
            raise NoRouter(self.topology.router_queue, envelope.task_id, reason)
        return await self.submit_to(envelope, agent_id)

    async def submit_to(self, envelope: TaskEnvelope, agent_id: str) -> TaskEnvelope:
        """Publish `envelope` (with confirm) straight to `agent_id`'s queue, bypassing the
        routers, marked ``route.strategy="local_rule"``; returns what was sent.

        Its worker records the task as it claims it (a task with no record starts at
        ``accepted``) and answers `reply_to` itself. It waits in the agent's queue until
        its deadline, then goes to the router queue like any expired dispatch.

        Raises:
            NoRouter: `agent_id` has no queue on the broker.
        """
        now = now_ms()
        sent = envelope.model_copy(
            update={
                "reply_to": envelope.reply_to or self.reply_to,
                "created_ms": envelope.created_ms or now,
                "deadline_ms": envelope.deadline_ms or now + envelope.timeout_ms,
                "route": LOCAL_RULE_ROUTE,
            }
        )
        left_ms = max(1, (sent.deadline_ms or now) - now)
        key = self.topology.agent_routing_key(agent_id, sent.priority)
        published = with_retries(
            lambda: self.publisher.publish_envelope(
                self.topology.capabilities, key, sent, expiration_ms=left_ms, mandatory=True
            ),
            self.publish_retry_s,
        )
        try:
            with self.hooks.ingress(sent, self.topology.capabilities):
                await published
        except PublishError:
            reason = f" and agent {agent_id!r} of the matching local rule has no queue"
            raise NoRouter(self.topology.router_queue, sent.task_id, reason) from None
        self.sent_by_rule += 1
        logger.warning(
            "no router consumes %s: task_id=%s sent to agent=%s by a local rule",
            self.topology.router_queue,
            sent.task_id,
            agent_id,
        )
        return sent

    async def _wait(self, sent: TaskEnvelope, fut: asyncio.Future[Result], limit: float) -> Result:
        """`fut`'s Result within `limit` seconds, looking for a router every few seconds.

        A Result of a routed task arriving since the last look counts as a router seen: in
        a cluster, a quorum queue's consumer count can stay stale through a leader change.

        Raises:
            RequestTimeout: no Result in time.
            NoRouter: no router consumed ingress for `ROUTERLESS_S` while ingress messages
                waited (the task is probably among them) and no routed Result came.
        """
        loop = asyncio.get_running_loop()
        end = loop.time() + limit
        # a task a local rule sent needs no router
        routed = sent.route is None or sent.route.strategy != LOCAL_RULE_ROUTE.strategy
        routed = routed and not self.wait_for_router
        routerless_since: float | None = None
        looked = loop.time()
        while True:
            left = end - loop.time()
            if left <= 0:
                raise RequestTimeout(f"no Result for task_id={sent.task_id} within {limit:.1f}s")
            done, _ = await asyncio.wait({fut}, timeout=min(left, ROUTER_RECHECK_S))
            if done:
                return fut.result()
            if not routed or end - loop.time() <= 0:
                continue
            seen = await self.watch.read(max_age_s=ROUTER_RECHECK_S / 2)
            routing, looked = self._routed_result_at >= looked, loop.time()
            if seen is None or seen.routers or not seen.waiting or routing:
                routerless_since = None
                self._routerless = False
                continue
            if not self._routerless:
                self._routerless = True
                logger.warning(
                    "no router consumes %s and %d ingress messages wait (the broker's count)",
                    self.topology.router_queue,
                    seen.waiting,
                )
            now = loop.time()
            routerless_since = now if routerless_since is None else routerless_since
            if now - routerless_since >= ROUTERLESS_S:
                reason = " any more (the task waits there until one does)"
                raise NoRouter(self.topology.router_queue, sent.task_id, reason)

    async def feedback(self, task_id: str, good: bool) -> str | None:
        """Tell the router whether a routed task went well; returns the agent it went to,
        or None under access control (the agent is not known to the caller there).

        `good` adds the task's text to that agent's example memory; bad counts against it.

        Without access control the routing record is read and the memory written from
        this process (it has Redis access). Under access control (a client's Redis user
        may only PING) the verdict is published to ``<ns>.feedback`` and this returns once
        the broker confirmed it: a router applies it only if this client's user submitted
        the task, and an unknown task_id is then only logged and counted by the router.

        Raises:
            mesh.UnknownTask: no routing record (not routed semantically,
                or older than 24 h); without access control only.
        """
        from mesh.router.feedback import give_feedback, send_feedback

        if self.settings.access_control:
            await send_feedback(self.publisher, task_id, good, retry_s=self.publish_retry_s)
            return None
        agent_id, _counted = await give_feedback(self.conn, self.publisher, task_id, good)
        return agent_id

    async def close(self) -> None:
        started, self._reply_queue = self._reply_queue is not None, None
        # cancel first: deleting a queue under its own consumer makes the broker
        # cancel it, which aiormq logs as a warning
        await self._replies.stop()
        for waiters in (*self._waiters.values(), *self._final_waiters.values()):
            for fut in waiters:
                fut.cancel()
        self._waiters.clear()
        self._final_waiters.clear()
        if started and not self._replies.channel.is_closed:
            try:
                await self._replies.channel.queue_delete(self.topology.reply_queue(self.queue_id))
            except TRANSIENT_ERRORS:
                logger.info("reply queue of client %s left to x-expires", self.client_id)
        await self._replies.close()
        await self.watch.close()
        await self.publisher.close()
