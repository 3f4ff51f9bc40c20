"""The `mesh` parser: help on every command and option, --version, one-line usage errors."""

from __future__ import annotations

import argparse

import pytest

from mesh.cli.main import build_parser, main


def _walk(parser: argparse.ArgumentParser, path: str) -> list[tuple[str, argparse.Action]]:
    found = []
    for action in parser._actions:
        found.append((path, action))
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                assert helps.get(name), f"`{path} {name}` has no help in `{path} --help`"
                assert child.description, f"`{path} {name} --help` has no description"
                found += _walk(child, f"{path} {name}")
    return found


def test_every_command_and_option_has_help() -> None:
    actions = _walk(build_parser(), "mesh")
    missing = [
        f"{path} {'/'.join(a.option_strings) or a.dest}"
        for path, a in actions
        if not (a.help and a.help.strip()) and a.help != argparse.SUPPRESS
    ]
    assert len(actions) > 40
    assert missing == []


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("mesh (agent-reach-mesh) ") and out.split()[-1][0].isdigit()


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["request", "hi", "--priority", "11"],
            "mesh request: --priority must be 1..10, got 11 (see `mesh request --help`)",
        ),
        (
            ["request", "hi", "--priority", "high"],
            "mesh request: --priority must be an integer 1..10, got 'high' "
            "(see `mesh request --help`)",
        ),
        (
            ["request", "hi", "--timeout-ms", "5"],
            "mesh request: --timeout-ms must be 100..3600000, got 5 (see `mesh request --help`)",
        ),
        (
            ["worker", "m:a", "--concurrency", "0"],
            "mesh worker: --concurrency must be at least 1, got 0 (see `mesh worker --help`)",
        ),
        (
            ["feedback", "t1", "meh"],
            "mesh feedback: verdict: invalid choice: 'meh' (choose from 'good', 'bad') "
            "(see `mesh feedback --help`)",
        ),
        (["nosuch"], None),
    ],
)
def test_usage_errors_are_one_line_naming_the_flag_exit_2(
    argv: list[str], line: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    if line is not None:
        assert err[0] == line
