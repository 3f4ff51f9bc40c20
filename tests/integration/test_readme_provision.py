"""The README's provisioning block, run as one shell script in throwaway vhosts.

Every ``mesh access provision`` line runs with the development flags (``--keep-guest
--keep-redis-default``, which the block's last line shows) and a unique ``--operator``:
this broker and Redis are shared, so guest and Redis' ``default`` user stay on. ``tenant1``
and ``dev`` become unique vhosts; the revoke line runs as ``--agent billing`` and then
``--delete-vhost``. What is left (the dev vhost, the operator) is removed at teardown.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mesh.config import Settings
from mesh.management import Management
from tests.integration.lockdown_kit import drop_operator, operator_name
from tests.integration.worker_process import settings_env
from tests.readme_blocks import commands

pytestmark = [pytest.mark.integration]

MESH = str(Path(sys.executable).parent / "mesh")
DEV_FLAGS = "--keep-guest --keep-redis-default"


def script(tenant: str, dev: str, operator: str) -> str:
    """The block as a bash script, rewritten as the module doc says."""
    lines = ["set -euo pipefail"]
    block = commands("provision")
    assert block[-1].endswith(DEV_FLAGS), "the block's last line shows the development flags"
    for line in block:
        line = line.replace("tenant1", tenant).replace("--vhost dev ", f"--vhost {dev} ")
        if line.startswith("mesh access provision"):
            if DEV_FLAGS not in line:
                line += f" {DEV_FLAGS}"
            line += f" --operator {operator}"
        if line.startswith("mesh access revoke"):
            assert line.endswith("[--agent ID ...] [--delete-vhost]"), line
            base = line.split(" [")[0]
            lines += [f"{base} --agent billing", f"{base} --delete-vhost"]
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def test_the_provisioning_block_runs_in_throwaway_vhosts(
    base_settings: Settings, tmp_path: Path
) -> None:
    tag = uuid.uuid4().hex[:10]
    tenant, dev, operator = f"test-readme-{tag}", f"test-readme-dev-{tag}", operator_name()
    management = Management(base_settings)
    env = settings_env(base_settings)
    env["PATH"] = f"{Path(MESH).parent}:{env['PATH']}"  # `mesh` as the block types it
    try:
        done = subprocess.run(
            ["bash", "-c", script(tenant, dev, operator)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert done.returncode == 0, done.stderr[-800:]
        roles = sorted(p.name for p in (tmp_path / "secrets" / tenant).iterdir())
        assert roles == [
            "admin.env",
            "client.web.env",
            "observer.ops.env",
            "operator.env",
            "registry.env",
            "router.env",
            "worker.support.logistics.env",
            "worker.support.refunds.env",
        ], roles
        assert "worker.billing" in done.stdout  # the dry run's plan, then the added agent
        assert management.vhost(tenant) is None  # revoke --delete-vhost
        assert management.vhost(dev) is not None  # the development line's vhost
        assert management.get_user("guest") is not None
    finally:
        subprocess.run(
            [MESH, "access", "revoke", "--vhost", dev, "--delete-vhost"],
            env=env,
            capture_output=True,
            timeout=60,
        )
        for vhost in (tenant, dev):
            if management.vhost(vhost) is not None:
                management.delete_vhost(vhost)
        asyncio.run(drop_operator(management, operator, base_settings.redis_url.get_secret_value()))
