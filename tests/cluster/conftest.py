"""The three-node RabbitMQ cluster of `infra/cluster.sh` for the ``cluster`` tests.

The session fixture starts it (about 20 s) unless it runs already, and stops it at the end
only when it started it. Without rabbitmq-server the tests skip, saying why.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mesh.config import Settings

CLUSTER_SH = Path(__file__).resolve().parents[2] / "infra" / "cluster.sh"
#: infra/cluster.sh's ports: node N listens on BASE_PORT + N
BASE_PORT = int(os.environ.get("MESH_CLUSTER_BASE_PORT", "5680"))
NODES = (1, 2, 3)


@dataclass(frozen=True)
class Cluster:
    amqp_urls: tuple[str, ...]
    management_url: str

    def urls_from(self, node: int) -> str:
        """Every node's URL, starting with `node`'s (a component's preferred node)."""
        i = node - 1
        return ",".join(self.amqp_urls[i:] + self.amqp_urls[:i])

    @staticmethod
    def node_of(port: int | None) -> int:
        assert port is not None
        return port - BASE_PORT

    async def run(self, *args: str) -> str:
        """``infra/cluster.sh ARGS`` (kill N, restart N, stop-app N, queues...); fails on an
        error; returns what it printed."""
        proc = await asyncio.create_subprocess_exec(
            "bash", str(CLUSTER_SH), *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = await proc.communicate()
        assert proc.returncode == 0, f"cluster.sh {' '.join(args)}: {err.decode()}{out.decode()}"
        return out.decode()

    def settings(self, namespace: str, node: int = 1, **overrides: object) -> Settings:
        return Settings.from_env(
            namespace=namespace,
            amqp_url=self.urls_from(node),
            management_url=self.management_url,
            **overrides,
        )


def _sh(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(CLUSTER_SH), *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """The running cluster (started here when it was not running; stopped if so)."""
    was_running = _sh("status").returncode == 0
    if not was_running:
        started = _sh("start")
        if started.returncode != 0:
            if "not installed" in started.stderr:
                pytest.skip(f"needs rabbitmq-server: {started.stderr.strip()}")
            _sh("stop")
            raise RuntimeError(f"infra/cluster.sh start failed: {started.stderr.strip()}")
    exports = dict(
        line.removeprefix("export ").split("=", 1)
        for line in _sh("urls").stdout.splitlines()
        if line.startswith("export ")
    )
    try:
        yield Cluster(
            amqp_urls=tuple(exports["MESH_AMQP_URL"].split(",")),
            management_url=exports["MESH_MANAGEMENT_URL"],
        )
    finally:
        if not was_running:
            _sh("stop")
        else:  # leave it as found: every node back
            for node in NODES:
                _sh("restart", str(node))


@pytest.fixture
def settings(cluster: Cluster, namespace: str) -> Settings:
    """The mesh settings of a cluster test: quorum queues, short leases, node 1 first."""
    return cluster.settings(namespace, queue_type="quorum", heartbeat_s=0.5, lease_ttl_s=1.5)
