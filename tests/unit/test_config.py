"""Settings from the environment, secrets masked, clear failures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mesh.config import Settings, mask_url
from mesh.errors import ConfigError


def test_defaults_are_loopback() -> None:
    s = Settings.from_env({})
    assert s.amqp_url_masked == "amqp://guest:******@127.0.0.1:5672/"
    assert s.redis_url_masked == "redis://127.0.0.1:6379/0"
    assert (s.heartbeat_s, s.lease_ttl_s, s.accept_timeout_ms) == (5.0, 15.0, 5_000)


def test_environment_overrides_and_types() -> None:
    s = Settings.from_env(
        {"MESH_LEASE_TTL_S": "1.5", "MESH_HEARTBEAT_S": "0.5", "MESH_RETRY_DELAYS_MS": "10,20"}
    )
    assert (s.lease_ttl_s, s.heartbeat_s, s.retry_delays_ms) == (1.5, 0.5, (10, 20))


def test_password_never_in_repr() -> None:
    s = Settings.from_env({"MESH_AMQP_URL": "amqp://bob:hunter2@rabbit:5672/"})
    assert "hunter2" not in repr(s)
    assert "hunter2" not in str(s)
    assert s.amqp_url_masked == "amqp://bob:******@rabbit:5672/"
    assert mask_url("redis://:pw@h:1/0") == "redis://:******@h:1/0"


def test_bad_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="MESH_PREFETCH"):
        Settings.from_env({"MESH_PREFETCH": "many"})


def test_heartbeat_must_fit_twice_in_the_lease() -> None:
    with pytest.raises(ConfigError, match="heartbeat_s"):
        Settings.from_env({"MESH_HEARTBEAT_S": "10", "MESH_LEASE_TTL_S": "15"})


@pytest.mark.parametrize(
    ("var", "url", "service"),
    [
        ("MESH_AMQP_URL", "amqp://guest:sekret@127.0.0.1:1/", "RabbitMQ"),
        ("MESH_REDIS_URL", "redis://:sekret@127.0.0.1:1/0", "Redis"),
    ],
)
def test_unreachable_service_exits_1_with_one_sentence(var: str, url: str, service: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mesh.cli.main", "request", "hello", "--target", "x"],
        env={var: url, "PATH": "/usr/bin:/bin", "MESH_CONNECT_TIMEOUT_S": "3"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "sekret" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert service in lines[0] and "******" in lines[0] and "infra/up.sh" in lines[0]
