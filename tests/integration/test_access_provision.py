"""`mesh access`: provisioned users are refused exactly what SECURITY.md says, and revoked.

Each test provisions its own vhost and namespace (unique names), applies the topology in
it as the provisioned admin, then proves each refusal with real aio-pika connections and
Redis clients logged in as the provisioned users. Everything provisioned is revoked and
the vhost deleted at teardown, also when a test fails.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from urllib.parse import urlsplit

import aio_pika
import aiormq.exceptions
import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import NoPermissionError, ResponseError

from mesh.access.provision import Credentials, Provisioner
from mesh.access.roles import AccessScope, Role
from mesh.cli.main import main
from mesh.config import Settings
from mesh.dispatch import lua as dispatch_lua
from mesh.keys import Keys
from mesh.management import Management
from mesh.registry import fencing
from mesh.topology import DELAY_HEADER
from tests.integration.access_kit import (
    AGENT_A,
    AGENT_B,
    CLIENT,
    DEAD_LETTER_CAP,
    OBSERVER,
    Opener,
    Provisioned,
    plan_for,
)
from tests.integration.lockdown_kit import drop_operator, operator_name

pytestmark = pytest.mark.integration


@pytest.fixture
async def login() -> AsyncIterator[Opener]:
    """Open plain (not robust) AMQP connections as a provisioned user; closed at teardown."""
    async with AsyncExitStack() as stack:

        async def open_as(creds: Credentials) -> aio_pika.abc.AbstractConnection:
            conn = await aio_pika.connect(creds.amqp_url, timeout=5)
            stack.push_async_callback(conn.close)
            return conn

        yield open_as


@pytest.fixture
async def redis_login() -> AsyncIterator[Callable[[Credentials], redis_asyncio.Redis]]:
    clients: list[redis_asyncio.Redis] = []

    def open_as(creds: Credentials) -> redis_asyncio.Redis:
        client = redis_asyncio.Redis.from_url(creds.redis_url)
        clients.append(client)
        return client

    yield open_as
    for client in clients:
        await client.aclose()


async def _ignore(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    """A consumer callback for consumes that are refused (or cancelled at once)."""


def _refused(exc: BaseException, code: int, name: str) -> str:
    """The broker's close reason; asserts the reply code (by aiormq's class) and its name."""
    assert type(exc) is aiormq.channel.EXCEPTION_MAPPING[code], repr(exc)
    text = str(exc.args[0])
    assert text.startswith(name), text
    return text


#: what no role may run: code of its own, another database, or a listing of key names
_NO_SCRIPTS = (
    ("EVAL", "return 1", "0"),
    ("EVAL_RO", "return 1", "0"),
    ("SCRIPT", "LOAD", "return 1"),
    ("SCRIPT", "DEBUG", "YES"),
    ("FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('x', function() end)"),
    ("FUNCTION", "FLUSH"),
    ("SCAN", "0"),
    ("RANDOMKEY",),
    ("SELECT", "1"),
)


async def _refused_in_redis(
    mesh_access: Provisioned, client: redis_asyncio.Redis, user: str, *command: str
) -> None:
    """`command` as `user` fails with NOPERM; first asked with ACL DRYRUN, so a wrong ACL
    fails the test instead of flushing or stopping the Redis every test shares."""
    plain = redis_asyncio.Redis.from_url(mesh_access.base_redis_url)
    try:
        verdict = await plain.execute_command("ACL", "DRYRUN", user, *command)
    finally:
        await plain.aclose()
    assert verdict != b"OK", f"{user} may run {command}"
    with pytest.raises(NoPermissionError):
        await client.execute_command(*command)


# --- the client ----------------------------------------------------------------------------
async def test_a_client_cannot_read_an_agent_queue(mesh_access: Provisioned, login: Opener) -> None:
    conn = await login(mesh_access.creds(Role("client", CLIENT)))
    channel = await conn.channel()
    queue = await channel.get_queue(
        mesh_access.topology.agent_queue(AGENT_A, "normal"), ensure=False
    )
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
        await queue.consume(_ignore)
    text = _refused(info.value, 403, "ACCESS_REFUSED")
    assert f"access to queue '{mesh_access.topology.agent_queue(AGENT_A, 'normal')}'" in text


async def test_a_client_cannot_bind_to_the_ingress_exchange(
    mesh_access: Provisioned, login: Opener
) -> None:
    user = mesh_access.user(Role("client", CLIENT))
    conn = await login(mesh_access.creds(Role("client", CLIENT)))
    channel = await conn.channel()
    topology = mesh_access.topology
    own = await channel.declare_queue(topology.reply_queue(f"{user}.{uuid.uuid4().hex[:8]}"))
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
        await own.bind(topology.ingress, routing_key=topology.ingress_key)
    assert topology.ingress in _refused(info.value, 403, "ACCESS_REFUSED")


async def test_a_client_cannot_publish_as_the_router(
    mesh_access: Provisioned, login: Opener
) -> None:
    conn = await login(mesh_access.creds(Role("client", CLIENT)))
    channel = await conn.channel(publisher_confirms=True)
    ingress = await channel.get_exchange(mesh_access.topology.ingress, ensure=False)
    forged = aio_pika.Message(b"{}", user_id=mesh_access.user(Role("router")))
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed) as info:
        await ingress.publish(forged, routing_key=mesh_access.topology.ingress_key)
    assert "user_id" in _refused(info.value, 406, "PRECONDITION_FAILED")


async def test_a_client_publishes_as_itself_and_consumes_its_own_reply_queue(
    mesh_access: Provisioned, login: Opener
) -> None:
    user = mesh_access.user(Role("client", CLIENT))
    topology = mesh_access.topology
    conn = await login(mesh_access.creds(Role("client", CLIENT)))
    channel = await conn.channel(publisher_confirms=True)
    ingress = await channel.get_exchange(topology.ingress, ensure=False)
    confirm = await ingress.publish(
        aio_pika.Message(b"{}", user_id=user), routing_key=topology.ingress_key, mandatory=True
    )
    assert isinstance(confirm, aiormq.spec.Basic.Ack)
    reply = await channel.declare_queue(
        topology.reply_queue(f"{user}.{uuid.uuid4().hex[:8]}"), durable=True
    )
    tag = await reply.consume(_ignore)
    await reply.cancel(tag)
    await channel.close()  # a clean close: nothing was refused on it


async def test_the_client_redis_user_can_run_no_command_but_ping(
    mesh_access: Provisioned, redis_login: Callable[[Credentials], redis_asyncio.Redis]
) -> None:
    client = redis_login(mesh_access.creds(Role("client", CLIENT)))
    keys = Keys(mesh_access.scope.namespace, mesh_access.scope.vhost)
    assert await client.ping()  # what `connect` checks
    for command in (client.get(keys.task("x")), client.eval("return 1", 0), client.info()):
        with pytest.raises(NoPermissionError):
            await command


# --- workers -------------------------------------------------------------------------------
async def test_a_worker_consumes_its_own_agent_queue(
    mesh_access: Provisioned, login: Opener
) -> None:
    topology = mesh_access.topology
    admin = await login(mesh_access.creds(Role("admin")))
    admin_channel = await admin.channel(publisher_confirms=True)
    capabilities = await admin_channel.get_exchange(topology.capabilities, ensure=False)
    await capabilities.publish(
        aio_pika.Message(b"task-for-a"), routing_key=topology.agent_routing_key(AGENT_A)
    )
    worker = await login(mesh_access.creds(Role("worker", AGENT_A)))
    channel = await worker.channel()
    queue = await channel.get_queue(topology.agent_queue(AGENT_A, "normal"), ensure=False)
    got: asyncio.Queue[aio_pika.abc.AbstractIncomingMessage] = asyncio.Queue()
    await queue.consume(got.put)
    message = await asyncio.wait_for(got.get(), timeout=5)
    assert message.body == b"task-for-a"
    await message.ack()


async def test_a_worker_cannot_consume_another_agents_queue(
    mesh_access: Provisioned, login: Opener
) -> None:
    conn = await login(mesh_access.creds(Role("worker", AGENT_B)))
    channel = await conn.channel()
    queue = await channel.get_queue(
        mesh_access.topology.agent_queue(AGENT_A, "normal"), ensure=False
    )
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
        await queue.consume(_ignore)
    text = _refused(info.value, 403, "ACCESS_REFUSED")
    assert f"access to queue '{mesh_access.topology.agent_queue(AGENT_A, 'normal')}'" in text


async def test_a_worker_cannot_dispatch_to_another_agent(
    mesh_access: Provisioned, login: Opener
) -> None:
    """No write on the capabilities exchange at all (router only, SECURITY.md)."""
    topology = mesh_access.topology
    conn = await login(mesh_access.creds(Role("worker", AGENT_A)))
    channel = await conn.channel(publisher_confirms=True)
    capabilities = await channel.get_exchange(topology.capabilities, ensure=False)
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
        await capabilities.publish(
            aio_pika.Message(b"{}"), routing_key=topology.agent_routing_key(AGENT_B)
        )
    text = _refused(info.value, 403, "ACCESS_REFUSED")
    assert f"access to exchange '{topology.capabilities}'" in text


async def test_topic_permissions_refuse_a_worker_forging_agent_events_or_binding_others(
    mesh_access: Provisioned, login: Opener
) -> None:
    topology = mesh_access.topology
    creds = mesh_access.creds(Role("worker", AGENT_A))
    conn = await login(creds)
    channel = await conn.channel(publisher_confirms=True)
    events = await (await conn.channel()).get_exchange(topology.events, ensure=False)
    await events.publish(aio_pika.Message(b"{}"), routing_key="task.completed")  # allowed
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
        await events.publish(aio_pika.Message(b"{}"), routing_key="agent.down")
    text = _refused(info.value, 403, "ACCESS_REFUSED")
    assert f"access to topic 'agent.down' in exchange '{topology.events}'" in text

    channel = await conn.channel()
    instance = topology.instance_queue(f"{AGENT_A}-{uuid.uuid4().hex[:6]}")
    queue = await channel.declare_queue(instance, exclusive=True, auto_delete=True)
    await queue.bind(topology.control, routing_key=topology.control_agent_key(AGENT_A))
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused) as info:
        await queue.bind(topology.control, routing_key=topology.control_agent_key(AGENT_B))
    text = _refused(info.value, 403, "ACCESS_REFUSED")
    other = topology.control_agent_key(AGENT_B)
    assert f"access to topic '{other}' in exchange '{topology.control}'" in text


async def test_a_worker_cannot_retry_into_another_agents_queue(
    mesh_access: Provisioned, login: Opener
) -> None:
    topology = mesh_access.topology
    conn = await login(mesh_access.creds(Role("worker", AGENT_A)))
    channel = await conn.channel(publisher_confirms=True)
    retry = await channel.get_exchange(topology.retry, ensure=False)
    delay = str(topology.retry_delays_ms[0])
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await retry.publish(
            aio_pika.Message(b"{}", headers={DELAY_HEADER: delay}),
            routing_key=topology.retry_key(int(delay), AGENT_B),
        )
    # its own agent's retry key is allowed
    conn = await login(mesh_access.creds(Role("worker", AGENT_A)))
    channel = await conn.channel(publisher_confirms=True)
    retry = await channel.get_exchange(topology.retry, ensure=False)
    await retry.publish(
        aio_pika.Message(b"{}"), routing_key=topology.retry_key(int(delay), AGENT_A)
    )


async def test_the_worker_redis_user_runs_the_mesh_functions_on_its_agents_task_keys_only(
    mesh_access: Provisioned, redis_login: Callable[[Credentials], redis_asyncio.Redis]
) -> None:
    worker = redis_login(mesh_access.creds(Role("worker", AGENT_A)))
    keys = Keys(mesh_access.scope.namespace, mesh_access.scope.vhost)
    task_id = uuid.uuid4().hex
    advance = dispatch_lua.LIBRARY.bind(worker, "advance")

    def task_keys(k: Keys) -> list[str]:
        return [k.task(task_id), k.task_history(task_id)]

    args = [60_000, "test", "", "", "submitted"]
    view = keys.for_agent(AGENT_A)
    assert await advance(keys=task_keys(view), args=args) == [1, b"submitted"]
    assert await worker.hget(view.task(task_id), "state") == b"submitted"
    for foreign in (keys, keys.for_agent(AGENT_B)):  # the mesh's record, another agent's
        with pytest.raises(ResponseError) as info:
            await advance(keys=task_keys(foreign), args=args)
        assert "NOPERM" in str(info.value) or "no permissions" in str(info.value)
    with pytest.raises(ResponseError) as info:  # a registry key, even from inside a function
        await fencing.LIBRARY.bind(worker, "issue")(keys=[keys.fence(AGENT_A)])
    assert "NOPERM" in str(info.value) or "no permissions" in str(info.value)
    user = mesh_access.user(Role("worker", AGENT_A))
    refused = [("FLUSHALL",), ("CONFIG", "GET", "maxmemory"), ("KEYS", "*"), *_NO_SCRIPTS]
    for command in refused:
        await _refused_in_redis(mesh_access, worker, user, *command)


# --- observers, services, limits, policy ----------------------------------------------------
async def test_the_observer_reads_events_and_redis_and_writes_only_its_own(
    mesh_access: Provisioned,
    login: Opener,
    redis_login: Callable[[Credentials], redis_asyncio.Redis],
) -> None:
    topology = mesh_access.topology
    observer = Role("observer", OBSERVER)
    conn = await login(mesh_access.creds(observer))
    channel = await conn.channel()
    name = f"{topology.namespace}.observer.{mesh_access.user(observer)}.{uuid.uuid4().hex[:6]}"
    queue = await channel.declare_queue(name, exclusive=True, auto_delete=True)
    await queue.bind(topology.events, routing_key="task.#")  # no request texts (SECURITY.md)
    router_queue = await channel.get_queue(topology.router_queue, ensure=False)
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await router_queue.consume(_ignore)
    events = await (await conn.channel()).get_exchange(topology.events, ensure=False)
    await events.publish(aio_pika.Message(b"{}"), routing_key="alert.loop")
    with pytest.raises(aiormq.exceptions.ChannelAccessRefused):
        await events.publish(aio_pika.Message(b"{}"), routing_key="agent.down")
    client = redis_login(mesh_access.creds(observer))
    keys = Keys(mesh_access.scope.namespace, mesh_access.scope.vhost)
    task = keys.task(uuid.uuid4().hex)
    assert await client.hgetall(task) == {}
    trace = keys.trace(uuid.uuid4().hex)
    assert await client.zadd(trace, {"event": 1}) == 1  # the traces it keeps
    await client.delete(trace)
    for command in (client.hset(task, "state", "x"), client.eval("return 1", 0)):
        with pytest.raises(NoPermissionError):
            await command


@pytest.mark.parametrize("role", [Role("admin"), Role("router"), Role("registry")])
async def test_service_redis_users_touch_their_own_keys_and_nothing_dangerous(
    mesh_access: Provisioned,
    redis_login: Callable[[Credentials], redis_asyncio.Redis],
    role: Role,
) -> None:
    client = redis_login(mesh_access.creds(role))
    keys = Keys(mesh_access.scope.namespace, mesh_access.scope.vhost)
    own = {"admin": keys.task("x"), "router": keys.idem("x"), "registry": keys.fence("x")}
    # the mesh's functions run (a fencing token: INCR, floored by Redis' clock)
    assert await fencing.LIBRARY.bind(client, "issue")(keys=[own[role.kind]]) > 10**15
    if role.kind != "admin":
        other = keys.fence("x") if role.kind == "router" else keys.task("x")
        with pytest.raises(NoPermissionError):
            await client.incr(other)
    user = mesh_access.user(role)
    refused = [("FLUSHDB",), ("CONFIG", "GET", "maxmemory"), ("SHUTDOWN", "NOSAVE")]
    for command in [*refused, *_NO_SCRIPTS]:
        await _refused_in_redis(mesh_access, client, user, *command)


async def test_user_limits_vhost_limit_and_the_dead_letter_cap_are_in_place(
    mesh_access: Provisioned, login: Opener
) -> None:
    management = mesh_access.management
    for g in mesh_access.plan.grants:
        limits = await asyncio.to_thread(management.user_limits, g.user)
        assert limits == {"max-connections": g.max_connections, "max-channels": g.max_channels}
    vhost_limits = await asyncio.to_thread(management.vhost_limits, mesh_access.scope.vhost)
    assert vhost_limits == {"max-queues": 200}

    topology = mesh_access.topology
    admin = await login(mesh_access.creds(Role("admin")))
    channel = await admin.channel(publisher_confirms=True)
    dlx = await channel.get_exchange(topology.dlx, ensure=False)
    body = b"x" * (DEAD_LETTER_CAP // 2 + 1)
    await dlx.publish(aio_pika.Message(body), routing_key=topology.dead_key("expired"))
    with pytest.raises(aio_pika.exceptions.DeliveryError):  # over the cap: reject-publish
        for _ in range(2):
            await dlx.publish(aio_pika.Message(body), routing_key=topology.dead_key("expired"))


# --- revoke --------------------------------------------------------------------------------
async def test_revoke_removes_users_acls_policy_and_open_connections(
    mesh_access: Provisioned, login: Opener
) -> None:
    management = mesh_access.management
    scope = mesh_access.scope
    worker_creds = mesh_access.creds(Role("worker", AGENT_A))
    live = await login(worker_creds)
    closed = asyncio.Event()
    live.close_callbacks.add(lambda *_: closed.set())
    users = [g.user for g in mesh_access.plan.grants]
    assert sorted(users) == await asyncio.to_thread(
        mesh_access.provisioner.provisioned_users, scope
    )
    assert await asyncio.to_thread(management.policy, scope.vhost, mesh_access.plan.policy.name)

    report = await asyncio.to_thread(mesh_access.provisioner.revoke, scope)

    assert sorted(report.removed) == sorted(users) == sorted(report.redis_removed)
    for user in users:
        assert await asyncio.to_thread(management.get_user, user) is None
    assert (
        await asyncio.to_thread(management.policy, scope.vhost, mesh_access.plan.policy.name)
        is None
    )
    assert await asyncio.to_thread(management.vhost, scope.vhost) is not None  # no --delete-vhost
    plain = redis_asyncio.Redis.from_url(mesh_access.base_redis_url)
    try:
        for user in users:
            assert await plain.execute_command("ACL", "GETUSER", user) is None
    finally:
        await plain.aclose()
    # the broker closes the connections of a deleted user (CONNECTION_FORCED)
    await asyncio.wait_for(closed.wait(), timeout=5)
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
        # aiormq: a refused aio_pika Connection closes itself when collected, in a later test
        await aiormq.connect(worker_creds.amqp_url)


# --- idempotency -----------------------------------------------------------------------------
async def test_provisioning_twice_keeps_users_and_rotate_issues_new_passwords(
    provisioner: Provisioner, scope: AccessScope, login: Opener
) -> None:
    first = await asyncio.to_thread(
        provisioner.provision, plan_for(scope, [AGENT_A]), create_vhost=True
    )
    assert {r.status for r in first.results} == {"created"}
    client = first.of(Role("client", CLIENT)).credentials
    assert client is not None

    again = await asyncio.to_thread(provisioner.provision, plan_for(scope, [AGENT_A, "gamma"]))
    statuses = {r.grant.role.label: r.status for r in again.results}
    assert statuses.pop("worker.gamma") == "created"
    assert set(statuses.values()) == {"kept"}
    assert [c.role.label for c in again.credentials()] == ["worker.gamma"]
    await login(client)  # the first password still works

    rotated = await asyncio.to_thread(
        provisioner.provision, plan_for(scope, [AGENT_A, "gamma"]), rotate=True
    )
    assert {r.status for r in rotated.results} == {"rotated"}
    with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
        # aiormq: a refused aio_pika Connection closes itself when collected, in a later test
        await aiormq.connect(client.amqp_url)
    new_client = rotated.of(Role("client", CLIENT)).credentials
    assert new_client is not None and new_client.amqp_url != client.amqp_url
    await login(new_client)

    one = await asyncio.to_thread(provisioner.revoke, scope, [Role("worker", "gamma")])
    assert one.removed == (scope.user(Role("worker", "gamma")),) and one.policy_removed is None
    left = await asyncio.to_thread(provisioner.provisioned_users, scope)
    assert scope.user(Role("worker", "gamma")) not in left and len(left) == 6


async def test_a_same_named_user_not_made_by_provision_is_refused(
    provisioner: Provisioner, scope: AccessScope, base_settings: Settings
) -> None:
    from mesh.errors import UserConflict

    management = Management(base_settings)
    squatter = scope.user(Role("router"))
    await asyncio.to_thread(management.put_user, squatter, uuid.uuid4().hex)
    try:
        with pytest.raises(UserConflict, match="not created by"):
            await asyncio.to_thread(provisioner.provision, plan_for(scope, []), create_vhost=True)
        # refused before anything changed: no user, no vhost
        assert await asyncio.to_thread(management.get_user, scope.user(Role("admin"))) is None
        assert await asyncio.to_thread(management.vhost, scope.vhost) is None
        assert await asyncio.to_thread(provisioner.provisioned_users, scope) == []
    finally:
        await asyncio.to_thread(management.delete_user, squatter)
    assert (await asyncio.to_thread(management.get_user, squatter)) is None


# --- the command -----------------------------------------------------------------------------
async def test_the_cli_writes_0600_env_files_and_never_logs_a_password(
    scope: AccessScope,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MESH_NAMESPACE", scope.namespace)
    monkeypatch.chdir(tmp_path)  # no stray .env
    operator = operator_name()
    # the shared broker's guest and Redis' default user stay on (every test uses them)
    argv = ["-vv", "access", "provision", "--vhost", scope.vhost, "--agent", AGENT_A]
    argv += ["--operator", operator, "--keep-guest", "--keep-redis-default"]
    caplog.set_level(logging.DEBUG)
    try:
        assert await asyncio.to_thread(main, [*argv, "--create-vhost", "--env-dir", "creds"]) == 0
        out, err = capsys.readouterr()
        files = sorted((tmp_path / "creds").iterdir())
        assert [f.name for f in files] == [
            "admin.env",
            "operator.env",
            "registry.env",
            "router.env",
            f"worker.{AGENT_A}.env",
        ]
        passwords = []
        for f in files:
            assert stat.S_IMODE(os.stat(f).st_mode) == 0o600
            lines = [line for line in f.read_text().splitlines() if not line.startswith("#")]
            env = dict(line.split("=", 1) for line in lines if line)
            if f.name == "operator.env":
                urls = [env["MESH_MANAGEMENT_URL"], env["MESH_REDIS_URL"]]
            else:
                assert env["MESH_NAMESPACE"] == scope.namespace
                urls = [env["MESH_AMQP_URL"], env["MESH_REDIS_URL"]]
            for url in urls:
                password = urlsplit(url).password
                assert password
                passwords.append(password)
        logged = out + err + caplog.text
        assert passwords and not any(pw in logged for pw in passwords)
        assert "left as it is (--keep-guest)" in err and "(--keep-redis-default)" in err

        # a second run keeps every user and says so; nothing secret on stdout
        assert await asyncio.to_thread(main, argv) == 0
        out, err = capsys.readouterr()
        assert "MESH_AMQP_URL" not in out and "not shown again" in err
        assert f"operator {operator!r} kept" in err

        assert await asyncio.to_thread(main, ["access", "revoke", "--vhost", scope.vhost]) == 0
        out, _ = capsys.readouterr()
        assert f"revoked user {scope.user(Role('admin'))!r}" in out
    finally:
        settings = Settings.from_env()
        await drop_operator(Management(settings), operator, settings.redis_url.get_secret_value())
