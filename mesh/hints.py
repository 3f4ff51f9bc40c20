"""What an error tells the user to do next, naming only what they have.

A checkout of the repository has `infra/up.sh`, which starts RabbitMQ and Redis on
loopback; a `pip install` has only the ``mesh`` command and the ``MESH_*`` settings. The
one test of which is `from_checkout`, and every start-up hint goes through `start_hint`.
"""

from __future__ import annotations

from pathlib import Path

#: the script of a checkout that starts RabbitMQ and Redis, relative to the checkout's root
UP_SCRIPT = Path("infra") / "up.sh"
#: the README section a pip user follows to run the services
SERVICES_SECTION = 'README "Running RabbitMQ and Redis yourself"'
#: the package's source root: the checkout when `mesh` is imported from one
SOURCE_ROOT = Path(__file__).resolve().parent.parent


def up_script(cwd: Path | None = None, root: Path | None = None) -> str | None:
    """How to name `infra/up.sh` from `cwd`: relative when it sits in `cwd`, absolute when
    it sits beside the package's source root (a checkout on the path, an editable install);
    None outside a checkout (a wheel in site-packages)."""
    here = Path.cwd() if cwd is None else cwd
    root = SOURCE_ROOT if root is None else root
    if (here / UP_SCRIPT).is_file():
        return str(UP_SCRIPT)
    if (root / UP_SCRIPT).is_file():
        return str(root / UP_SCRIPT)
    return None


def from_checkout(cwd: Path | None = None, root: Path | None = None) -> bool:
    """Whether this process runs from a checkout (it has `infra/up.sh`)."""
    return up_script(cwd, root) is not None


def start_hint(variable: str, *, cwd: Path | None = None, root: Path | None = None) -> str:
    """How to reach a service that did not answer at the URL of `variable`."""
    script = up_script(cwd, root)
    if script is not None:
        return f"start it with `bash {script}` (or set {variable})"
    return f"set {variable} to where it runs, or start it ({SERVICES_SECTION})"


def management_hint(*, cwd: Path | None = None, root: Path | None = None) -> str:
    """How to get a management API that did not answer at MESH_MANAGEMENT_URL."""
    enable = "enable it with `rabbitmq-plugins enable rabbitmq_management`"
    script = up_script(cwd, root)
    if script is not None:
        return f"{enable} ({script} does)"
    return f"{enable}, or set MESH_MANAGEMENT_URL to where it listens"


__all__ = ["from_checkout", "management_hint", "start_hint", "up_script"]
