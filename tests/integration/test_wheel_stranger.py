"""A stranger with only the built wheel: the README's examples in a folder of their own.

The wheel is built from this checkout (`pip wheel --no-deps`, from a copy, so no build
files land in the checkout) and installed into a fresh ``python3.11 -m venv`` (its
dependencies come from the package index through pip's cache). Then, in a fresh folder
that has its own ``schemas.py`` and nothing of the checkout on the path, run what the
README shows, each block found by its ``<!-- test: NAME -->`` marker:

- ``agent``: saved as ``my_agents.py``;
- ``quickstart``: ``mesh registry``, ``mesh router``, ``mesh worker my_agents:refunds`` in
  the background, then the ``mesh request`` line, answered by that worker;
- ``client``: the Python client script, answered by the same worker;
- ``amqp``: the plain AMQP client, run with ``mesh`` made unimportable (aio-pika only);
- ``harness``: saved as ``test_my_agents.py``, passing under a plain ``pytest`` (no plugin).

One line is not run from the wheel: ``mesh router`` needs the ``router`` extra (the
embedding stack, 354 MB, and the model conversion), too slow to install per run. The
router runs from this checkout's venv as a separate process against the same namespace
and broker; every other command is the wheel's ``mesh``. About 1-3 minutes with a warm pip
cache (most of it the venv and the install).
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh.config import Settings
from mesh.management import Management
from tests.readme_blocks import readme_block

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: the checkout's own `mesh`, for the router only (see the module doc)
REPO_MESH = str(Path(sys.executable).parent / "mesh")
#: what the checkout copy for the build leaves out
NOT_BUILT = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".mypy_cache",
    ".ruff_cache", ".pytest_cache", "node_modules", "bench", "tests", "agents",
)  # fmt: skip


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel of this checkout (and pytest) and nothing else of it."""
    base = tmp_path_factory.mktemp("stranger")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=NOT_BUILT)
    wheels = base / "wheels"
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(source)])
    (wheel,) = wheels.glob("agent_reach_mesh-*.whl")
    python = shutil.which("python3.11") or sys.executable
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([python, "-m", "venv", str(base / "venv")], env=env)
    pip = [str(base / "venv" / "bin" / "python"), "-m", "pip", "-q", "--disable-pip-version-check"]
    _run([*pip, "install", str(wheel), "pytest"], env=env, timeout=480)
    return base / "venv"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The stranger's project: its own schemas.py (the FastAPI habit), and the README's code."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "schemas.py").write_text("class Order:\n    pass\n")
    (app / "my_agents.py").write_text(readme_block("agent"))
    (app / "test_my_agents.py").write_text(readme_block("harness"))
    (app / "client.py").write_text(readme_block("client"))
    (app / "amqp_client.py").write_text(readme_block("amqp"))
    return app


@pytest.fixture
def env(venv: Path, settings: Settings) -> Iterator[dict[str, str]]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    environ["PATH"] = f"{venv / 'bin'}{os.pathsep}{environ.get('PATH', '/usr/bin:/bin')}"
    environ["MESH_NAMESPACE"] = settings.namespace
    yield environ
    Management(settings).purge_namespace(settings.namespace)


def test_the_wheel_holds_no_checkout_files(venv: Path, folder: Path, env: dict[str, str]) -> None:
    probe = "import mesh, mesh.hints as h; print(mesh.__file__); print(h.from_checkout())"
    done = _run([str(venv / "bin" / "python"), "-c", probe], cwd=folder, env=env)
    where, checkout = done.stdout.split()
    assert Path(where).is_relative_to(venv) and checkout == "False"


def test_the_harness_example_passes_under_plain_pytest(
    venv: Path, folder: Path, env: dict[str, str]
) -> None:
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
    assert "asyncio" not in _run([str(venv / "bin" / "python"), "-m", "pip", "list"]).stdout


def test_the_quick_start_agent_client_and_plain_amqp_examples(
    venv: Path, folder: Path, env: dict[str, str]
) -> None:
    lines = [line.split("#")[0].strip() for line in readme_block("quickstart").splitlines()]
    background = [shlex.split(line[:-1]) for line in lines if line.endswith("&")]
    (request,) = [shlex.split(line) for line in lines if line and not line.endswith("&")]
    assert [argv[:2] for argv in background] == [
        ["mesh", "registry"],
        ["mesh", "router"],
        ["mesh", "worker"],
    ]
    router_env = {**env, "PYTHONPATH": str(ROOT)}
    procs = []
    try:
        for argv in background:
            if argv[1] == "router":  # the checkout's router (see the module doc)
                proc = subprocess.Popen([REPO_MESH, *argv[1:]], cwd=folder, env=router_env)
            else:
                proc = subprocess.Popen(
                    [str(venv / "bin" / argv[0]), *argv[1:]], cwd=folder, env=env
                )
            procs.append(proc)
        _wait_until_routed(venv, folder, env)
        asked = _run(
            [str(venv / "bin" / request[0]), *request[1:]], cwd=folder, env=env, timeout=60
        )
        answer = json.loads(asked.stdout)  # not a terminal: the Result as JSON
        assert answer["status"] == "completed", answer
        assert answer["agent_id"] == "support.refunds"
        assert answer["output"] == {"refund_id": "RF-42"}

        python = str(venv / "bin" / "python")
        scripted = _run([python, "client.py"], cwd=folder, env=env, timeout=60)
        assert scripted.stdout.startswith("completed support.refunds"), scripted.stdout
        assert "RF-42" in scripted.stdout

        # aio-pika only: importing mesh would fail
        no_mesh = "import sys; sys.modules['mesh'] = None; exec(open('amqp_client.py').read())"
        plain = _run([python, "-c", no_mesh], cwd=folder, env=env, timeout=60)
        assert plain.stdout.startswith("completed support.refunds"), plain.stdout
        assert "RF-42" in plain.stdout
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def _wait_until_routed(
    venv: Path, folder: Path, env: dict[str, str], timeout: float = 120.0
) -> None:
    """Until a router consumes and the worker's agent is live (`mesh health`, `mesh agents`)."""
    end = time.monotonic() + timeout
    mesh = str(venv / "bin" / "mesh")
    while True:
        healthy = subprocess.run(
            [mesh, "health", "router"], cwd=folder, env=env, capture_output=True
        )
        agents = subprocess.run(
            [mesh, "agents"], cwd=folder, env=env, capture_output=True, text=True
        )
        if healthy.returncode == 0 and "support.refunds" in agents.stdout:
            return
        if time.monotonic() > end:
            raise AssertionError(f"no router and live agent within {timeout:.0f} s: {agents}")
        time.sleep(0.5)  # a poll of separate processes, with its deadline above
