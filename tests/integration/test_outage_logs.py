"""Quiet, honest outages: `mesh registry`, `mesh router`, `mesh worker` and `mesh observer`,
each a process of its own on a private Redis and a private RabbitMQ node, live through a
10 s Redis outage and a 10 s broker outage (``rabbitmqctl stop_app``). Each says at most
5 lines per outage, among them one WARNING that the dependency was lost (its URL masked,
that it retries) and one INFO that it is back with the outage's length, no traceback; a
request completes after each outage."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.lockdown_kit import throwaway_redis
from tests.integration.outage_kit import NodeUnavailable, PrivateNode, private_rabbitmq

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
MESH = str(ROOT / ".venv" / "bin" / "mesh")
OUTAGE_S = 10.0
MAX_LINES = 5
SERVICES = {
    "registry": ["registry"],
    "router": ["router"],
    "worker": ["worker", "outage_agents:echo"],
    "observer": ["observer"],
}

AGENTS = textwrap.dedent(
    """
    from mesh import Agent

    echo = Agent("outage.echo", "Repeats what it is told.")


    @echo.handler
    async def _echo(task, ctx):
        return {"said": task.capability}
    """
)


@pytest.fixture
def node() -> Iterator[PrivateNode]:
    try:
        with private_rabbitmq() as started:
            yield started
    except NodeUnavailable as exc:
        pytest.skip(f"no private RabbitMQ node: {exc}")


class RedisServer:
    """The private redis-server of `throwaway_redis`, killed and started again on its port."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.port = int(url.rsplit(":", 1)[1].split("/")[0])
        self.process: subprocess.Popen[bytes] | None = None

    def pid(self) -> int:
        found = subprocess.run(
            ["pgrep", "-f", f"redis-server 127.0.0.1:{self.port}"],
            capture_output=True,
            text=True,
            check=True,
        )
        return int(found.stdout.split()[0])

    def kill(self) -> None:
        os.kill(self.pid(), signal.SIGKILL)

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", ""],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )


class Services:
    """The four services as processes, their stderr in files."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder = folder
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def log(self, name: str) -> Path:
        return self.folder / f"{name}.err"

    def start(self) -> None:
        for name, args in SERVICES.items():
            with self.log(name).open("wb") as err:
                self.procs[name] = subprocess.Popen(
                    [MESH, *args],
                    cwd=self.folder,
                    env=self.env,
                    stdout=subprocess.DEVNULL,
                    stderr=err,
                )

    def marks(self) -> dict[str, int]:
        return {name: self.log(name).stat().st_size for name in SERVICES}

    def since(self, marks: dict[str, int]) -> dict[str, list[str]]:
        out = {}
        for name in SERVICES:
            data = self.log(name).read_bytes()[marks[name] :].decode(errors="replace")
            out[name] = data.splitlines()
        return out

    def request(self, deadline_s: float) -> str:
        """A request completes (tried again until `deadline_s`): its output."""
        end = time.monotonic() + deadline_s
        while True:
            done = subprocess.run(
                [MESH, "request", "--target", "outage.echo", "--wait-s", "20", "hello"],
                cwd=self.folder,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            if done.returncode == 0 and '"completed"' in done.stdout:
                return done.stdout
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"{name} exited: {self.log(name).read_text()[-2000:]}"
            assert time.monotonic() < end, (done.stdout, done.stderr)
            time.sleep(0.5)  # a CLI round trip failed fast (no router yet): ask again

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def wait_for_lines(
    services: Services, marks: dict[str, int], pattern: re.Pattern[str], names: list[str]
) -> None:
    """Until every service of `names` logged a line matching `pattern` (20 s at most)."""
    end = time.monotonic() + 20
    while True:
        lines = services.since(marks)
        missing = [n for n in names if not any(pattern.search(line) for line in lines[n])]
        if not missing:
            return
        assert time.monotonic() < end, {n: lines[n] for n in missing}
        time.sleep(0.2)  # reading other processes' log files: nothing to wait on


def check_outage(lines: dict[str, list[str]], service: str, where: str, noticed: list[str]) -> None:
    lost = re.compile(
        rf"WARNING mesh\.outage: {service} at {re.escape(where)} lost.*retrying|"
        rf"WARNING mesh\.outage: {service} at {re.escape(where)} lost.*reconnecting"
    )
    back = re.compile(
        rf"INFO mesh\.outage: {service} at {re.escape(where)} is back after "
        r"(\d+\.\d)s"
    )
    for name, said in lines.items():
        assert len(said) <= MAX_LINES, (service, name, said)
        assert not any("Traceback" in line for line in said), (service, name, said)
        if name in noticed:
            assert sum(bool(lost.search(line)) for line in said) == 1, (name, said)
            lengths = [float(m.group(1)) for line in said if (m := back.search(line))]
            assert len(lengths) == 1, (name, said)
            assert OUTAGE_S - 1 <= lengths[0] <= OUTAGE_S + 15, (name, lengths)


def test_each_service_says_an_outage_in_a_few_lines_and_works_after(
    node: PrivateNode, tmp_path: Path
) -> None:
    (tmp_path / "outage_agents.py").write_text(AGENTS)
    with throwaway_redis() as redis_url:
        redis_server = RedisServer(redis_url)
        env = {
            **os.environ,
            "MESH_NAMESPACE": f"outage{uuid.uuid4().hex[:8]}",
            "MESH_AMQP_URL": node.url,
            "MESH_REDIS_URL": redis_url,
            "MESH_LOG_LEVEL": "INFO",
            "MESH_HEARTBEAT_S": "0.5",
            "MESH_LEASE_TTL_S": "1.5",
        }
        services = Services(tmp_path, env)
        try:
            services.start()
            services.request(deadline_s=90)

            # Redis: killed for 10 s, then started again on its port (empty: leases re-made)
            marks = services.marks()
            redis_server.kill()
            time.sleep(OUTAGE_S)  # the outage itself: its length is what is measured
            redis_server.start()
            services.request(deadline_s=30)
            noticed = ["registry", "router", "observer"]
            wait_for_lines(services, marks, re.compile(r"Redis at .* is back after"), noticed)
            redis_said = services.since(marks)
            check_outage(redis_said, "Redis", redis_url, noticed)

            # RabbitMQ: the node's app stopped for 10 s (every connection closed)
            marks = services.marks()
            node.stop_app()
            time.sleep(OUTAGE_S)  # the outage itself
            node.start_app()
            services.request(deadline_s=30)
            where = node.url.replace(":guest@", ":******@")
            everyone = list(SERVICES)
            wait_for_lines(services, marks, re.compile(r"RabbitMQ at .* is back after"), everyone)
            broker_said = services.since(marks)
            check_outage(broker_said, "RabbitMQ", where, everyone)
        finally:
            services.stop()
            if redis_server.process is not None:
                redis_server.process.kill()
                redis_server.process.wait()
    for name in SERVICES:
        print(f"{name}: Redis {len(redis_said[name])} lines, broker {len(broker_said[name])}")
