"""`mesh access provision` is safe by default: it creates the operator login, takes guest's
password away and switches Redis' `default` user off, says so and how to undo it; adding
an agent, rotating and revoking then work as the operator.

Never on the shared guest or the shared Redis' `default` (see `lockdown_kit`): Redis is a
throw-away ``redis-server``, guest is a throw-away administrator (``--guest NAME``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aio_pika
import aiormq
import pytest
import redis.asyncio as redis_asyncio
from redis.exceptions import AuthenticationError, NoPermissionError

from mesh.access.roles import AccessScope, Role
from mesh.cli.main import main
from mesh.config import Settings
from mesh.errors import ConfigError
from mesh.management import Management
from tests.integration.lockdown_kit import (
    drop_operator,
    operator_name,
    stand_in_guest,
    throwaway_redis,
)

pytestmark = pytest.mark.integration

AGENT = "support.refunds"
LATER = "billing"


@pytest.fixture
def private_redis() -> Iterator[str]:
    with throwaway_redis() as url:
        yield url


@pytest.fixture
async def operator(base_settings: Settings) -> AsyncIterator[str]:
    name = operator_name()
    yield name
    await drop_operator(Management(base_settings), name)


def _env(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and line[0] != "#"]
    return dict(line.split("=", 1) for line in lines)


async def _refused_without_login(url: str) -> None:
    client = redis_asyncio.Redis.from_url(url)
    try:
        with pytest.raises(AuthenticationError, match="authenticated"):
            await client.keys("*")
    finally:
        await client.aclose()


async def test_the_default_provisioning_locks_down_and_the_operator_carries_on(
    base_settings: Settings,
    scope: AccessScope,
    private_redis: str,
    operator: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)  # no stray .env
    monkeypatch.setenv("MESH_NAMESPACE", scope.namespace)
    monkeypatch.setenv("MESH_REDIS_URL", private_redis)
    management = Management(base_settings)
    async with stand_in_guest(management) as (guest, guest_password):
        argv = ["access", "provision", "--vhost", scope.vhost, "--agent", AGENT]
        argv += ["--operator", operator, "--guest", guest]
        first = [*argv, "--create-vhost", "--env-dir", "creds"]
        assert await asyncio.to_thread(main, first) == 0
        _, err = capsys.readouterr()
        assert f"broker user {guest!r} can no longer log in" in err
        assert f"undo: rabbitmqctl change_password {guest} guest" in err
        assert "Redis user 'default' switched off" in err
        assert f"undo: redis-cli --user {operator} --askpass ACL SETUSER default on" in err
        assert f"operator {operator!r}: broker user created, Redis user created" in err

        # guest (its stand-in) can no longer log in; Redis refuses a client without a login
        locked = Settings(management_url=f"http://{guest}:{guest_password}@127.0.0.1:15672/")
        with pytest.raises(ConfigError, match="refused the login"):
            await asyncio.to_thread(Management(locked).users)
        assert (await asyncio.to_thread(management.get_user, guest) or {})["tags"] == [
            "administrator"
        ]
        await _refused_without_login(private_redis)

        # the operator: an administrator on the broker, in Redis ACLs and kills, no key
        op = _env(tmp_path / "creds" / "operator.env")
        op_redis = redis_asyncio.Redis.from_url(op["MESH_REDIS_URL"])
        try:
            assert await op_redis.acl_whoami() == operator
            for refused in (op_redis.keys("*"), op_redis.get("x"), op_redis.config_get("*")):
                with pytest.raises(NoPermissionError):
                    await refused
        finally:
            await op_redis.aclose()
        worker_before = _env(tmp_path / "creds" / f"worker.{AGENT}.env")

        # from now on as the operator: add an agent, rotate, revoke
        monkeypatch.setenv("MESH_MANAGEMENT_URL", op["MESH_MANAGEMENT_URL"])
        monkeypatch.setenv("MESH_REDIS_URL", op["MESH_REDIS_URL"])
        more = [*argv, "--agent", LATER, "--env-file", "later.env"]
        assert await asyncio.to_thread(main, more) == 0
        _, err = capsys.readouterr()
        assert f"role worker.{LATER}: user {scope.user(Role('worker', LATER))!r} created" in err
        assert f"broker user {guest!r} had no password already" in err
        assert "Redis user 'default' already off" in err
        later = _env(tmp_path / "later.env")
        worker = redis_asyncio.Redis.from_url(later["MESH_REDIS_URL"])
        try:
            assert await worker.ping()
        finally:
            await worker.aclose()
        amqp = await aio_pika.connect(later["MESH_AMQP_URL"], timeout=5)
        await amqp.close()

        rotate = [*argv, "--agent", LATER, "--rotate", "--env-file", "rotated.env"]
        assert await asyncio.to_thread(main, rotate) == 0
        capsys.readouterr()
        old = redis_asyncio.Redis.from_url(worker_before["MESH_REDIS_URL"])
        try:
            with pytest.raises(AuthenticationError):
                await old.ping()
        finally:
            await old.aclose()
        with pytest.raises(aiormq.exceptions.ProbableAuthenticationError):
            # aiormq, not aio_pika: a refused aio_pika Connection closes itself when collected
            await aiormq.connect(worker_before["MESH_AMQP_URL"])
        assert "MESH_REDIS_URL" in (tmp_path / "rotated.env").read_text()

        revoke = ["access", "revoke", "--vhost", scope.vhost, "--agent", LATER]
        assert await asyncio.to_thread(main, revoke) == 0
        out, _ = capsys.readouterr()
        assert f"revoked user {scope.user(Role('worker', LATER))!r}" in out
        op_redis = redis_asyncio.Redis.from_url(op["MESH_REDIS_URL"])
        try:
            gone = scope.user(Role("worker", LATER))
            assert await op_redis.acl_getuser(gone) is None
            assert await op_redis.acl_getuser(scope.user(Role("router")))
        finally:
            await op_redis.aclose()
        assert await asyncio.to_thread(main, ["access", "revoke", "--vhost", scope.vhost]) == 0


def test_the_dry_run_says_what_the_lockdown_would_do(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MESH_MANAGEMENT_URL", "http://nobody:x@127.0.0.1:1/")
    assert main(["access", "provision", "--vhost", "t1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "operator 'mesh-operator': broker administrator, Redis -@all" in out
    assert "guest 'guest': password taken away" in out
    assert "Redis user 'default': switched off" in out
    argv = ["access", "provision", "--dry-run", "--keep-guest", "--keep-redis-default"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "guest 'guest': kept" in out and "Redis user 'default': kept" in out
