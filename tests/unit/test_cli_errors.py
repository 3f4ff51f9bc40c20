"""`mesh` turns every error into one line: exit 2 for usage, 1 for failures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import aio_pika
import aiormq.exceptions
import pytest

from mesh.cli import main as cli_main
from mesh.cli._args import MeshArgumentParser, UsageError
from mesh.cli._broker import describe_channel_error
from mesh.cli.request import build_envelope
from mesh.config import Settings
from mesh.errors import ConfigError, ServiceUnavailable

ROOT = Path(__file__).resolve().parents[2]

PRECONDITION = (
    "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'shop.router' in vhost "
    "'/': received 'quorum' but current is 'classic'"
)


def _run_raising(
    exc: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[str]]:
    """Run `mesh boom`, whose command raises `exc`; return the exit code and stderr lines."""

    def parser() -> argparse.ArgumentParser:
        p = MeshArgumentParser(prog="mesh")
        p.add_argument("-v", "--verbose", action="count", default=0)
        sub = p.add_subparsers(dest="command", required=True)
        boom = sub.add_parser("boom")

        def func(args: argparse.Namespace, settings: Settings) -> int:
            raise exc

        boom.set_defaults(func=func)
        return p

    monkeypatch.setattr(cli_main, "build_parser", parser)
    monkeypatch.setenv("MESH_NAMESPACE", "shop")
    code = cli_main.main(["boom"])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize(
    ("exc", "code", "starts"),
    [
        (UsageError("--tag 'x' is not K=V"), 2, "mesh: --tag 'x' is not K=V"),
        (ConfigError("--instance-id needs exactly one agent"), 1, "mesh: --instance-id needs"),
        (
            ServiceUnavailable("Redis", "redis://127.0.0.1:1/0", "start it"),
            1,
            "mesh: Redis at redis://127.0.0.1:1/0 is unreachable; start it",
        ),
        (
            aio_pika.exceptions.ChannelPreconditionFailed(PRECONDITION),
            1,
            "mesh: RabbitMQ refused to redeclare queue 'shop.router': its argument x-queue-type "
            "differs (received 'quorum' but current is 'classic'), so namespace 'shop' was "
            "created with other queue settings",
        ),
        (
            aiormq.exceptions.ChannelAccessRefused("ACCESS_REFUSED - access to queue denied"),
            1,
            "mesh: RabbitMQ at amqp://guest:******@127.0.0.1:5672/ refused access",
        ),
        (
            ModuleNotFoundError("No module named 'fastembed'", name="fastembed"),
            1,
            "mesh: the router needs the embedding stack: pip install 'agent-reach-mesh[router]'",
        ),
    ],
    ids=["usage", "config", "unreachable", "precondition", "access", "router-extra"],
)
def test_errors_become_one_line_with_their_exit_code(
    exc: BaseException,
    code: int,
    starts: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    got, lines = _run_raising(exc, monkeypatch, capsys)
    assert got == code
    assert len(lines) == 1, lines
    assert lines[0].startswith(starts), lines[0]


def test_other_missing_modules_are_not_blamed_on_the_router_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ModuleNotFoundError):
        _run_raising(ModuleNotFoundError("nope", name="nope"), monkeypatch, capsys)


def test_an_unrecognised_precondition_still_names_the_namespace() -> None:
    exc = aio_pika.exceptions.ChannelPreconditionFailed("PRECONDITION_FAILED - something")
    text = describe_channel_error(exc, Settings(namespace="shop"))
    assert text == (
        "RabbitMQ refused a declaration in namespace 'shop': PRECONDITION_FAILED - something"
    )


def _request_args(**overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {
        "capability": "hello",
        "payload": "{}",
        "target": None,
        "priority": 5,
        "timeout_ms": 30_000,
        "tag": [],
        "task_id": None,
    }
    values.update(overrides)
    return argparse.Namespace(**values)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"payload": "{nope"}, "--payload is not valid JSON"),
        ({"payload": "[1]"}, "--payload must be a JSON object"),
        ({"tag": ["lang"]}, "--tag 'lang' is not K=V"),
        ({"target": "no spaces please"}, "--target: string should match pattern"),
        ({"task_id": "x" * 200}, "--task-id: string should have at most"),
        ({"capability": ""}, "CAPABILITY: string should have at least 1 character"),
    ],
)
def test_request_values_name_their_flag(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as info:
        build_envelope(_request_args(**overrides))
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value) and "pydantic" not in str(info.value)


def test_payload_and_range_errors_share_exit_code_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli_main.main(["request", "hi", "--payload", "[1]"]) == 2
    with pytest.raises(SystemExit) as exit_:
        cli_main.main(["request", "hi", "--priority", "0"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "mesh: --payload must be a JSON object",
        "mesh request: --priority must be 1..10, got 0 (see `mesh request --help`)",
    ]


def test_exports_print_to_stdout_for_the_configured_namespace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MESH_NAMESPACE", "someone-else")
    assert cli_main.main(["topology", "export"]) == 0
    assert '"someone-else.ingress"' in capsys.readouterr().out
    assert cli_main.main(["schemas", "export"]) == 0
    assert '"task_envelope.schema.json"' in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []  # nothing written, in the package or here
    assert cli_main.main(["topology", "export", "--check"]) == 2
    assert "needs --out PATH" in capsys.readouterr().err


def test_topology_export_of_another_namespace_goes_where_it_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MESH_NAMESPACE", "someone-else")
    out = tmp_path / "defs.json"
    assert cli_main.main(["topology", "export", "--out", str(out)]) == 0
    assert '"someone-else.ingress"' in out.read_text()
    assert cli_main.main(["topology", "export", "--out", str(out), "--check"]) == 0
    out.write_text("{}")
    assert cli_main.main(["topology", "export", "--out", str(out), "--check"]) == 1
    assert f"run `mesh topology export --out {out}`" in capsys.readouterr().err


#: agent modules whose import fails, and the one line `mesh worker` prints for each
BROKEN_MODULES = [
    ("", "nosuch.module:agent", "cannot import 'nosuch.module': no module named 'nosuch'"),
    (
        "def broken(:\n",
        "{m}:agent",
        "cannot import '{m}': SyntaxError: invalid syntax ({m}.py, line 1)",
    ),
    (
        "import os\nraise RuntimeError('set SHOP_API_KEY')\n",
        "{m}:agent",
        "cannot import '{m}': RuntimeError: set SHOP_API_KEY ({m}.py, line 2)",
    ),
    (
        "import no_such_dependency_h5\n",
        "{m}:agent",
        "cannot import '{m}': ModuleNotFoundError: No module named 'no_such_dependency_h5' "
        "({m}.py, line 1)",
    ),
]


@pytest.mark.parametrize(
    ("source", "spec", "said"), BROKEN_MODULES, ids=["missing", "syntax", "raises", "dependency"]
)
def test_an_agent_module_that_does_not_import_is_one_line_exit_2(
    source: str,
    spec: str,
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setattr(sys, "path", list(sys.path))  # --app-dir goes first on it
    module = f"broken_{request.node.callspec.id}_{tmp_path.name[-6:]}".replace("-", "_")
    if source:
        (tmp_path / f"{module}.py").write_text(source)
    code = cli_main.main(["worker", spec.format(m=module), "--app-dir", str(tmp_path)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("mesh: " + said.format(m=module)), lines[0]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["worker", "x:y", "--instance-id", "Bad Id!"],
            "mesh worker: --instance-id must be 1-128 characters of A-Z a-z 0-9 _ . : @ -, "
            "got 'Bad Id!'",
        ),
        (["events", "--count", "-1"], "mesh events: --count must be at least 0, got -1"),
        (
            ["dlq", "replay", "expired", "--target", "a b"],
            "mesh dlq replay: --target must be 1-128 characters",
        ),
    ],
    ids=["instance-id", "events-count", "dlq-target"],
)
def test_bad_values_are_one_line_naming_the_flag(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        cli_main.main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), lines
