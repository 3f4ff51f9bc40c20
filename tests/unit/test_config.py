"""Settings from the environment, secrets masked, clear failures."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from mesh import config
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


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which unknown names this process already warned about."""
    monkeypatch.setattr(config, "_warned_unknown", set())


@pytest.mark.usefixtures("fresh_warnings")
def test_unknown_variable_is_named_once_with_the_closest_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = {"MESH_NAMESAPCE": "x", "MESH_FOO": "1", "MESH_PREFETCH": "8", "OTHER": "y"}
    with caplog.at_level(logging.WARNING, logger="mesh.config"):
        Settings.from_env(env)
        Settings.from_env(env)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "ignoring unknown setting(s): MESH_FOO, MESH_NAMESAPCE (did you mean MESH_NAMESPACE?)"
    ]


@pytest.mark.usefixtures("fresh_warnings")
def test_known_variables_are_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    env = {f"MESH_{name.upper()}": "" for name in ("fallback_agent", "similarity_threshold")}
    with caplog.at_level(logging.WARNING, logger="mesh.config"):
        Settings.from_env(env)
    assert caplog.records == []


def test_dotenv_is_read_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text(
        "# local settings\n"
        "export MESH_NAMESPACE=from-dotenv\n"
        "MESH_PREFETCH = 7  # a comment\n"
        "MESH_FALLBACK_AGENT='help.desk'\n"
        'MESH_AMQP_URL="amqp://bob:pw@rabbit:5672/"\n'
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MESH_PREFETCH", raising=False)
    monkeypatch.delenv("MESH_AMQP_URL", raising=False)
    monkeypatch.delenv("MESH_FALLBACK_AGENT", raising=False)
    monkeypatch.setenv("MESH_NAMESPACE", "from-env")
    s = Settings.from_env()
    assert (s.namespace, s.prefetch, s.fallback_agent) == ("from-env", 7, "help.desk")
    assert s.amqp_url_masked == "amqp://bob:******@rabbit:5672/"


def test_an_explicit_environ_ignores_dotenv(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("MESH_PREFETCH=7\n")
    monkeypatch.chdir(tmp_path)
    assert Settings.from_env({}).prefetch == Settings().prefetch


def test_a_malformed_dotenv_line_names_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / ".env").write_text("MESH_PREFETCH=7\nnot a setting\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"\.env:2 is not KEY=VALUE"):
        Settings.from_env()


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("amqp:/127.0.0.1", "names no host"),
        ("http://guest:guest@127.0.0.1:5672/", "should start with amqp:// or amqps://"),
        ("amqp://guest:sekret@127.0.0.1:port/", "does not parse"),
    ],
)
def test_a_malformed_url_is_one_sentence_naming_the_variable(url: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings.from_env({"MESH_AMQP_URL": url})
    message = str(info.value)
    assert message.startswith("invalid settings: MESH_AMQP_URL: ") and problem in message
    assert "sekret" not in message and "\n" not in message


def test_a_malformed_url_on_the_command_line_is_one_line() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mesh.cli.main", "agents"],
        env={"MESH_AMQP_URL": "amqp:/127.0.0.1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "mesh: invalid settings: MESH_AMQP_URL: 'amqp:/127.0.0.1' names no host "
        "(expected amqp://USER:PASS@HOST:PORT/)"
    ]


def test_retry_delays_that_do_not_parse_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="MESH_RETRY_DELAYS_MS='1s,5s'"):
        Settings.from_env({"MESH_RETRY_DELAYS_MS": "1s,5s"})


def test_an_empty_blas_threads_variable_leaves_blas_alone() -> None:
    assert Settings.from_env({"MESH_BLAS_THREADS": ""}).blas_threads is None
    assert Settings.from_env({}).blas_threads == 1


def test_the_project_scripts_variables_are_not_warned_about() -> None:
    from mesh.config import warn_unknown

    env = {"MESH_SKIP_CLUSTER": "1", "MESH_TEST_ACCESS_CONTROL": "1", "MESH_NAMESAPCE_X": "a"}
    assert warn_unknown(env) == ["MESH_NAMESAPCE_X"]
