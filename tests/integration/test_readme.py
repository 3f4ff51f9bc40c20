"""The README's examples, run exactly as printed, the way a new user meets them.

- the agent example, saved as ``my_agents.py`` in a fresh folder, runs with
  ``mesh worker my_agents:refunds`` started from that folder;
- the client example, saved as a script, gets its answer from that agent;
- the ``mesh.testing`` example, saved as ``test_my_agents.py`` in the same folder, passes
  under pytest there;
- the quick start's demo command runs (the test command is what runs this test).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from mesh.config import Settings
from mesh.management import Management
from tests.readme_blocks import commands, readme_block

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MESH = str(Path(sys.executable).parent / "mesh")
README = (ROOT / "README.md").read_text()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A fresh folder outside the repository, as a user's project would be."""
    return tmp_path


@pytest.fixture
def env(settings: Settings) -> Iterator[dict[str, str]]:
    environ = {**os.environ, "MESH_NAMESPACE": settings.namespace}
    environ.pop("PYTHONPATH", None)
    yield environ
    Management(settings).purge_namespace(settings.namespace)


def test_the_agent_and_client_examples_run_as_printed(folder: Path, env: dict[str, str]) -> None:
    (folder / "my_agents.py").write_text(readme_block("agent"))
    (folder / "client.py").write_text(readme_block("client"))
    procs = [
        subprocess.Popen([MESH, "registry"], cwd=folder, env=env, stdout=subprocess.DEVNULL),
        subprocess.Popen([MESH, "router"], cwd=folder, env=env, stdout=subprocess.DEVNULL),
        subprocess.Popen(
            [MESH, "worker", "my_agents:refunds"],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
        ),
    ]
    try:
        # with no router consuming, a request fails within a second (`mesh.NoRouter`): wait for the
        # router to load its model, as `mesh health router` tells; a worker still
        # registering only makes the example wait longer
        _wait_for_router(folder, env)
        done = subprocess.run(
            [sys.executable, "client.py"],
            cwd=folder,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("completed support.refunds"), done.stdout
        assert "RF-42" in done.stdout
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)


def _wait_for_router(folder: Path, env: dict[str, str], timeout: float = 90.0) -> None:
    end = time.monotonic() + timeout
    probe = [MESH, "health", "router"]
    while subprocess.run(probe, cwd=folder, env=env, capture_output=True).returncode != 0:
        if time.monotonic() > end:
            raise AssertionError(f"`mesh health router` not healthy within {timeout:.0f} s")
        time.sleep(0.5)  # a poll of a separate process, with its deadline above


def test_the_testing_example_passes_under_pytest_in_a_fresh_folder(folder: Path) -> None:
    (folder / "test_my_agents.py").write_text(readme_block("harness"))
    # PYTHONPATH stays: it names the checkout under test (test_wheel_stranger.py runs the
    # example with the built wheel and nothing of the checkout)
    env = dict(os.environ)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:asyncio",  # the example needs no plugin (harness.run_sync)
            "test_my_agents.py",
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_quick_start_demo_runs(env: dict[str, str]) -> None:
    demo, suite = commands("demo-command")
    assert demo == "bash infra/demo.sh"
    # the other line is the suite this test runs in (infra/test.sh is what CI runs)
    assert suite == "bash infra/test.sh" and "infra/test.sh" in (ROOT / ".ci" / "run").read_text()
    done = subprocess.run(
        demo.split(),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "expectations in" in done.stdout and "all met" in done.stdout
    # a clean run of its own namespace leaves no process logs behind
    removed = re.search(r"demo: process logs removed \((\S+);", done.stdout)
    assert removed is not None, done.stdout[-2000:]
    assert not Path(removed.group(1)).exists()
