"""Installing the Node.js agent of ``agents/node/`` (the demo's and the tests' one way).

`install` runs ``npm ci --prefix agents/node`` when the lock file changed since the last
install (a stamp in ``node_modules`` holds its digest), under a file lock so concurrent
processes install once; `missing` says which of node and npm is not on the PATH.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path

NODE_DIR = Path(__file__).resolve().parent / "node"
STAMP = NODE_DIR / "node_modules" / ".agent-reach-lock-sha256"
#: how long ``npm ci`` may take
INSTALL_TIMEOUT_S = 300


def missing() -> list[str]:
    """The programs of node and npm that are not on the PATH."""
    return [name for name in ("node", "npm") if shutil.which(name) is None]


def install() -> None:
    """``npm ci --prefix agents/node`` once per version of ``package-lock.json``.

    Raises:
        RuntimeError: node or npm is missing, or the install failed (its output says why).
    """
    absent = missing()
    if absent:
        raise RuntimeError(f"{' and '.join(absent)} not found (apt-get install nodejs npm)")
    digest = hashlib.sha256((NODE_DIR / "package-lock.json").read_bytes()).hexdigest()
    lock_path = Path(tempfile.gettempdir()) / "agent-reach-node-agent.lock"
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if STAMP.exists() and STAMP.read_text() == digest:
            return
        done = subprocess.run(
            ["npm", "ci", "--prefix", str(NODE_DIR), "--no-audit", "--no-fund"],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"npm ci failed in {NODE_DIR}:\n{done.stdout}\n{done.stderr}")
        STAMP.write_text(digest)
