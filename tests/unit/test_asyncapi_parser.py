"""The AsyncAPI document passes the reference parser (`@asyncapi/parser`, from npm).

`infra/asyncapi/validate.mjs` parses a document and exits 1 on any error; its
`package.json` pins the parser and `npm ci` installs it (once: `node_modules` is kept
beside it, never committed). Skipped only where Node.js or npm is not installed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from mesh.cli.main import main

VALIDATOR = Path(__file__).resolve().parents[2] / "infra" / "asyncapi"
NODE, NPM = shutil.which("node"), shutil.which("npm")

pytestmark = pytest.mark.skipif(
    NODE is None or NPM is None, reason="Node.js and npm are needed to run @asyncapi/parser"
)


@pytest.fixture(scope="module")
def validator() -> Path:
    """The validator script, its pinned parser installed."""
    assert NPM is not None
    if not (VALIDATOR / "node_modules" / "@asyncapi" / "parser").is_dir():
        subprocess.run(
            [NPM, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
            cwd=VALIDATOR,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return VALIDATOR / "validate.mjs"


def validate(validator: Path, path: Path) -> subprocess.CompletedProcess[str]:
    assert NODE is not None
    return subprocess.run(
        [NODE, str(validator), str(path)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.parametrize(
    "env",
    [
        {},
        {
            "MESH_NAMESPACE": "acme",
            "MESH_QUEUE_TYPE": "quorum",
            "MESH_AMQP_URL": "amqp://bob:s3cret@rabbit-1:5673/prod,amqp://bob:s3cret@rabbit-2/prod",
        },
    ],
    ids=["default", "quorum-two-nodes"],
)
def test_mesh_asyncapi_output_parses_without_errors(
    validator: Path,
    env: dict[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["asyncapi"]) == 0
    printed = capsys.readouterr().out
    assert "s3cret" not in printed
    path = tmp_path / "asyncapi.json"
    path.write_text(printed)
    done = validate(validator, path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("0 error(s)"), done.stdout


def test_the_validator_reports_a_broken_document(validator: Path, tmp_path: Path) -> None:
    good = tmp_path / "good.json"
    assert main(["asyncapi", "--out", str(good)]) == 0
    assert validate(validator, good).returncode == 0
    doc: dict[str, Any] = orjson.loads(good.read_bytes())
    # an operation on a channel the document does not have
    first = next(iter(doc["operations"].values()))
    first["channel"] = {"$ref": "#/channels/no.such.channel"}
    broken = tmp_path / "broken.json"
    broken.write_bytes(orjson.dumps(doc))
    done = validate(validator, broken)
    assert done.returncode == 1, done.stdout
    assert "error" in done.stdout and "no.such.channel" in done.stdout, done.stdout
