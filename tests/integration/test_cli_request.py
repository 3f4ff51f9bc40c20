"""`mesh request` without a router (`mesh.NoRouter`), namespaces the broker does not have,
changed queue settings: each says so in one line, at once, with the documented exit code."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from aio_pika.abc import AbstractIncomingMessage

from mesh.cli.main import main
from mesh.connection import MeshConnection
from mesh.management import Management

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")


def _mesh(args: list[str], namespace: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [MESH, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "MESH_NAMESPACE": namespace, **env},
    )


async def _declare(conn: MeshConnection) -> None:
    channel = await conn.channel()
    await conn.topology.declare(channel)
    await channel.close()


def _exchanges(management: Management, namespace: str) -> set[str]:
    return {e["name"] for e in management.exchanges() if e["name"].startswith(namespace + ".")}


async def test_request_without_a_router_fails_at_once(
    conn: MeshConnection,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _declare(conn)
    monkeypatch.setenv("MESH_NAMESPACE", conn.settings.namespace)
    started = time.monotonic()
    code = await asyncio.to_thread(main, ["request", "hello", "--task-id", "t-1"])
    took = time.monotonic() - started
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert lines == [
        f"mesh: no router consumes {conn.topology.router_queue}, so task_id=t-1 is not "
        "routed: check the routers with `mesh health router` (start one with `mesh router`)"
    ]
    assert took < 10  # connecting included; the task's own timeout is 30 s


async def test_request_shows_progress_while_a_router_holds_it(
    conn: MeshConnection,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    await _declare(conn)
    # a router that takes the task and never answers
    channel = await conn.channel()
    queue = await channel.get_queue(conn.topology.router_queue, ensure=False)
    await queue.consume(_hold, no_ack=False)
    monkeypatch.setenv("MESH_NAMESPACE", conn.settings.namespace)
    code = await asyncio.to_thread(
        main, ["request", "hello", "--wait-s", "1.2", "--progress-s", "0.5"]
    )
    lines = capsys.readouterr().err.strip().splitlines()
    await channel.close()
    assert code == 1
    waiting = [line for line in lines if line.startswith("mesh: waiting for task_id=")]
    assert len(waiting) == 2, lines  # at 0.5 s and 1.0 s of a 1.2 s wait
    assert lines[-1].startswith("mesh: no Result for task_id=") and "1.2s" in lines[-1]


async def _hold(message: AbstractIncomingMessage) -> None:
    """Keep the delivery unacked (the broker requeues it when the channel closes)."""


async def test_a_namespace_the_broker_lacks_is_refused_unless_create(
    conn: MeshConnection, management: Management
) -> None:
    ns = conn.settings.namespace
    refused = await asyncio.to_thread(_mesh, ["request", "hello", "--wait-s", "0.5"], ns)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines() == [
        f"mesh: namespace {ns!r} does not exist on RabbitMQ at "
        f"{conn.settings.amqp_url_masked} (no exchange {ns}.ingress): check MESH_NAMESPACE "
        "or start `mesh router` there, or pass --create"
    ]
    assert _exchanges(management, ns) == set()
    # the same command with --create declares it: the absence above was the refusal's doing
    created = await asyncio.to_thread(
        _mesh, ["request", "hello", "--wait-s", "0.5", "--create"], ns
    )
    assert created.returncode == 1  # nobody routes it
    assert f"no router consumes {ns}.router" in created.stderr
    assert f"{ns}.ingress" in _exchanges(management, ns)


async def test_a_changed_queue_type_is_one_sentence_and_exit_1(conn: MeshConnection) -> None:
    await _declare(conn)
    ns = conn.settings.namespace
    done = await asyncio.to_thread(_mesh, ["topology", "declare"], ns, MESH_QUEUE_TYPE="quorum")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"mesh: RabbitMQ refused to redeclare queue '{ns}."), lines[0]
    assert f"namespace {ns!r} was created with other queue settings" in lines[0]


async def test_dlq_names_the_namespace_queues(
    conn: MeshConnection, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await _declare(conn)
    monkeypatch.setenv("MESH_NAMESPACE", conn.settings.namespace)
    assert await asyncio.to_thread(main, ["dlq", "list", "expired"]) == 0
    assert await asyncio.to_thread(main, ["dlq", "replay", "expired"]) == 0
    assert capsys.readouterr().err.strip().splitlines() == [
        f"{conn.topology.dead_queue('expired')} is empty",
        f"nothing replayed from {conn.topology.dead_queue('expired')}",
    ]


async def test_dlq_in_a_namespace_the_broker_lacks_is_one_sentence(
    conn: MeshConnection,
) -> None:
    done = await asyncio.to_thread(_mesh, ["dlq", "list", "expired"], conn.settings.namespace)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not exist on RabbitMQ" in lines[0], lines
    assert "--create" not in lines[0]


def test_wrong_password_is_one_sentence(tmp_path: Path) -> None:
    done = _mesh(
        ["agents"], "test-nosuch", MESH_AMQP_URL="amqp://guest:wrong-sekret@127.0.0.1:5672/"
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "mesh: RabbitMQ at amqp://guest:******@127.0.0.1:5672/ refused the login of user "
        "'guest': check the user and password in MESH_AMQP_URL (a broker refuses guest off "
        "loopback)"
    ]
