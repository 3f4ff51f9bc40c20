"""Quorum mode on a three-node cluster: SIGKILL the node a component is connected to,
under load, three times; every accepted task gets exactly one terminal Result and no side
effect happens twice.

Client, router and worker run in this process, each on its own connection and preferring
its own node (client node 1, router node 2, worker node 3), so each kill hits a component
at a different place in the pipeline: the first kills the client's node, the second the
router's, the third the worker's, wherever they failed over to by then.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from pydantic import SecretStr

from mesh import MeshClient
from mesh.config import Settings
from mesh.connection import FailoverConnection, MeshConnection, connect
from mesh.schemas import Result
from tests.agents_for_tests import effect_agent
from tests.cluster.conftest import Cluster
from tests.conftest import wait_until
from tests.integration.dispatch_kit import start_router, start_worker

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

RATE = 25  # tasks a second
TASKS = 500  # 20 s of load
#: seconds after the load starts when the client's, router's and worker's node is killed
KILLS_AT = (4.0, 10.0, 16.0)
#: how long a killed node stays down before `cluster.sh restart`
DOWN_S = 2.0


def node_of(conn: MeshConnection) -> int:
    return Cluster.node_of(conn.amqp.url.port)


async def connected_elsewhere(
    conn: MeshConnection, victim: int, started: float, timeout: float
) -> float:
    """Seconds from `started` until `conn` is connected again, to a node but `victim`."""
    amqp = conn.amqp
    assert isinstance(amqp, FailoverConnection)
    await wait_until(
        lambda: node_of(conn) != victim and amqp.connected.is_set() and not amqp.reconnecting,
        timeout=timeout,
    )
    return time.monotonic() - started


@pytest.mark.timeout(420)
async def test_node_kills_under_load_lose_and_double_nothing(
    cluster: Cluster, settings: Settings, mesh_env: Any, add_cleanup: Any
) -> None:
    client_conn: MeshConnection = await mesh_env("-client")

    async def on_node(node: int, name: str) -> MeshConnection:
        s = settings.model_copy(update={"amqp_url": SecretStr(cluster.urls_from(node))})
        conn = await connect(s, name=f"cluster-{name}")
        add_cleanup(conn.close)
        return conn

    router_conn = await on_node(2, "router")
    worker_conn = await on_node(3, "worker")
    roles = {"client": client_conn, "router": router_conn, "worker": worker_conn}
    assert {name: node_of(c) for name, c in roles.items()} == {
        "client": 1,
        "router": 2,
        "worker": 3,
    }
    router = await start_router(router_conn, add_cleanup)
    agent = effect_agent(worker_conn)
    agent.max_concurrency = 16
    await start_worker(worker_conn, add_cleanup, agent)
    client = MeshClient(client_conn)
    await client.start()
    add_cleanup(client.close)

    async def one(i: int) -> Result:
        await asyncio.sleep(i / RATE)
        return await client.request(
            "work", {"n": i, "sleep_s": 0.2}, target="effect", timeout_ms=60_000, wait_s=90
        )

    loop = asyncio.get_running_loop()
    began = loop.time()
    pending = [asyncio.ensure_future(one(i)) for i in range(TASKS)]
    report: list[str] = []
    try:
        for at, role in zip(KILLS_AT, ("client", "router", "worker"), strict=True):
            await asyncio.sleep(max(0.0, began + at - loop.time()))
            victim = node_of(roles[role])
            hit = [name for name, c in roles.items() if node_of(c) == victim]
            killed = time.monotonic()
            await cluster.run("kill", str(victim))
            took = await asyncio.gather(
                *(connected_elsewhere(roles[name], victim, killed, timeout=30) for name in hit)
            )
            down_for = DOWN_S - min(took)
            await asyncio.sleep(max(0.0, down_for))
            await cluster.run("restart", str(victim))
            report.append(
                f"kill node {victim} ({'+'.join(hit)}): failed over in "
                + ", ".join(f"{name} {t:.2f}s" for name, t in zip(hit, took, strict=True))
            )
    finally:
        for node in (1, 2, 3):  # every node back, whatever happened
            await cluster.run("restart", str(node))
    outcomes = await asyncio.gather(*pending, return_exceptions=True)
    load_end = loop.time() - began
    results = [r for r in outcomes if isinstance(r, Result)]
    errors = [r for r in outcomes if not isinstance(r, Result)]
    # a later task through the same router and worker: once its Result is back, any second
    # Result sent for an earlier task has arrived too
    probe = await client.request("work", {"n": -1}, target="effect", timeout_ms=30_000, wait_s=60)
    redis, keys = worker_conn.redis, worker_conn.keys
    effects = [await redis.get(keys.side_effect(f"work:{r.task_id}")) for r in results]
    runs = [int(await redis.get(keys.side_effect(f"runs:{r.task_id}")) or 0) for r in results]
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    summary = (
        f"{TASKS} tasks in {load_end:.1f}s; {'; '.join(report)}; statuses {statuses}; "
        f"{len(errors)} without a Result ({sorted({type(e).__name__ for e in errors})}: "
        f"{[e for e in errors if type(e).__name__ != 'RequestTimeout'][:3]!r}); "
        f"{client.duplicate_results} duplicate copies, {client.conflicting_results} "
        f"conflicting; {sum(1 for n in runs if n > 1)} handlers rerun; "
        f"{sum(1 for e in effects if e != b'1')} side effects not exactly once"
    )
    print(summary)
    if errors:  # what the broker and the router said, to tell a stale count from a stop
        listing = await cluster.run("queues")
        ours = [line for line in listing.splitlines() if settings.namespace in line]
        intake = router._intake_sub
        subs = [] if intake is None else intake.subscribers
        summary += (
            f"; router handled {router.handled}, its intake consuming "
            f"{[s.consuming for s in subs]}, channels closed "
            f"{[s._channel.is_closed if s._channel else None for s in subs]}, "
            f"delivered {[s.delivered for s in subs]}; queues (name type leader consumers "
            f"ready unacked): {ours}"
        )
    assert probe.status == "completed", summary
    assert not errors, summary
    assert statuses == {"completed": TASKS}, summary
    assert sorted(r.output["n"] for r in results if r.output) == list(range(TASKS)), summary
    assert client.results_received == TASKS + 1, summary  # and the probe
    assert client.conflicting_results == 0, summary
    assert all(e == b"1" for e in effects), summary


async def test_a_consumer_follows_its_quorum_queue_to_another_node(
    cluster: Cluster, settings: Settings, mesh_env: Any, add_cleanup: Any
) -> None:
    """The connection layer alone: a consumer on the node that dies is restored on the
    next node and gets what is published after; nothing confirmed is lost."""
    consumer_conn: MeshConnection = await mesh_env("-consumer")  # node 1 first
    s2 = settings.model_copy(update={"amqp_url": SecretStr(cluster.urls_from(2))})
    publisher_conn = await connect(s2, name="cluster-publisher")
    add_cleanup(publisher_conn.close)
    assert (node_of(consumer_conn), node_of(publisher_conn)) == (1, 2)
    name = f"{settings.namespace}.follow"
    channel = await consumer_conn.channel(prefetch=10)
    queue = await channel.declare_queue(name, durable=True, arguments={"x-queue-type": "quorum"})
    got: list[bytes] = []

    async def on_message(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        got.append(message.body)
        await message.ack()

    await queue.consume(on_message)
    pub = await publisher_conn.channel()

    async def publish(body: bytes) -> None:
        await pub.default_exchange.publish(
            aio_pika.Message(body, delivery_mode=aio_pika.DeliveryMode.PERSISTENT), name
        )

    await publish(b"0")
    await wait_until(lambda: got == [b"0"])
    killed = time.monotonic()
    await cluster.run("kill", "1")
    try:
        failover = await connected_elsewhere(consumer_conn, 1, killed, timeout=30)
        # the queue takes publishes again once its leader is re-elected (a nack until then)
        sent = 0

        async def accepted() -> bool:
            nonlocal sent
            try:
                await publish(f"{sent + 1}".encode())
            except aiormq.exceptions.DeliveryError:
                return False
            sent += 1
            return True

        await wait_until(accepted, timeout=30, interval=0.05)
        writable = time.monotonic() - killed
        for _ in range(9):
            assert await accepted()
        await wait_until(lambda: len(got) == 1 + sent, timeout=30)
        consuming = time.monotonic() - killed
    finally:
        await cluster.run("restart", "1")
    assert got == [str(i).encode() for i in range(sent + 1)]
    print(
        f"node 1 killed: consumer reconnected to node {node_of(consumer_conn)} in "
        f"{failover:.2f}s; queue accepted publishes again after {writable:.2f}s; "
        f"all {sent} later messages consumed after {consuming:.2f}s"
    )
