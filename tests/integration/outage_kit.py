"""Private services for outage tests: a RabbitMQ node of the test's own.

The shared broker and Redis serve every other test, so an outage test never stops them: it
starts a ``redis-server`` (`tests.integration.lockdown_kit.throwaway_redis`) and a
single RabbitMQ node (`private_rabbitmq`) on spare ports, the way `infra/cluster.sh`
starts its nodes (a node name, ports, data, logs and Erlang cookie of its own), and stops
them, or their app, at will.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.integration.lockdown_kit import _free_port

#: where `infra/cluster.sh` looks for the real scripts (Debian's /usr/sbin ones are wrappers
#: that switch to the rabbitmq user and its cookie)
SBIN_CANDIDATES = (os.environ.get("MESH_RABBITMQ_SBIN", ""), "/usr/lib/rabbitmq/bin")


class NodeUnavailable(RuntimeError):
    """A private RabbitMQ node cannot run on this machine (the reason is the message)."""


def _sbin() -> Path:
    for candidate in SBIN_CANDIDATES:
        if candidate and (Path(candidate) / "rabbitmq-server").exists():
            return Path(candidate)
    raise NodeUnavailable(
        "rabbitmq-server is not installed (or set MESH_RABBITMQ_SBIN to its folder)"
    )


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class PrivateNode:
    """One RabbitMQ node started by a test: its URL, and its app stopped and started."""

    name: str
    port: int
    env: dict[str, str]
    sbin: Path
    process: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def ctl(self, *args: str, timeout_s: float = 60.0) -> None:
        subprocess.run(
            [str(self.sbin / "rabbitmqctl"), "-q", "-n", self.name, *args],
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=timeout_s,
        )

    def stop_app(self) -> None:
        """``rabbitmqctl stop_app``: every connection is closed, the VM stays up."""
        self.ctl("stop_app")
        assert not _port_open(self.port), "the AMQP listener is still open after stop_app"

    def start_app(self, deadline_s: float = 60.0) -> None:
        self.ctl("start_app")
        self.wait_listening(deadline_s)

    def wait_listening(self, deadline_s: float) -> None:
        end = time.monotonic() + deadline_s
        while not _port_open(self.port):
            if self.process.poll() is not None:
                raise NodeUnavailable(
                    f"RabbitMQ node {self.name} exited ({self.process.returncode})"
                )
            if time.monotonic() > end:
                raise NodeUnavailable(f"RabbitMQ node {self.name} not listening in {deadline_s:g}s")
            time.sleep(0.1)  # polling a booting VM: nothing to wait on


@contextmanager
def private_rabbitmq(deadline_s: float = 60.0) -> Iterator[PrivateNode]:
    """A single RabbitMQ node on free ports (AMQP, distribution), no plugins, guest/guest
    on loopback; stopped and its folder removed at the end.

    Raises:
        NodeUnavailable: not installed, or it did not start in `deadline_s`.
    """
    sbin = _sbin()
    folder = Path(tempfile.mkdtemp(prefix="mesh-private-rabbit-"))
    port, dist_port = _free_port(), _free_port()
    name = f"mesh-test-{uuid.uuid4().hex[:8]}@localhost"
    home = folder / "home"
    home.mkdir()
    cookie = home / ".erlang.cookie"
    cookie.write_text(uuid.uuid4().hex.upper())
    cookie.chmod(0o400)
    (folder / "enabled_plugins").write_text("[].\n")
    (folder / "rabbitmq.conf").write_text(
        f"listeners.tcp.1 = 127.0.0.1:{port}\nlog.console = false\nlog.file.level = warning\n"
    )
    (folder / "rabbitmq-env.conf").write_text("")
    env = {
        **os.environ,
        "HOME": str(home),
        "RABBITMQ_CONF_ENV_FILE": str(folder / "rabbitmq-env.conf"),
        "RABBITMQ_CONFIG_FILE": str(folder / "rabbitmq.conf"),
        "RABBITMQ_ADVANCED_CONFIG_FILE": str(folder / "advanced.config"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(folder / "enabled_plugins"),
        "RABBITMQ_NODENAME": name,
        "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
        "RABBITMQ_NODE_PORT": str(port),
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_MNESIA_BASE": str(folder / "mnesia"),
        "RABBITMQ_LOG_BASE": str(folder / "log"),
        "RABBITMQ_PID_FILE": str(folder / "pid"),
        "ERL_EPMD_ADDRESS": "127.0.0.1",
        "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        "RABBITMQ_CTL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
    }
    with (folder / "stdout.log").open("wb") as out:
        process = subprocess.Popen(
            [str(sbin / "rabbitmq-server")],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    node = PrivateNode(name, port, env, sbin, process)
    try:
        node.wait_listening(deadline_s)
        yield node
    finally:
        with suppress(subprocess.SubprocessError, OSError):
            node.ctl("stop", timeout_s=30)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait()
        shutil.rmtree(folder, ignore_errors=True)
