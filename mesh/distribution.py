"""The installed distribution: its name on the package index and its version."""

from __future__ import annotations

from importlib import metadata

#: the name to `pip install` (``agent-reach`` on the index is another project)
DISTRIBUTION = "agent-reach-mesh"


def installed_version() -> str:
    """The installed version, or a sentence saying it is not installed."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # run from a checkout that is not installed
        return "unknown (not installed)"


def extra_hint(extra: str) -> str:
    """The install command of one extra, quoted for a shell."""
    return f"pip install '{DISTRIBUTION}[{extra}]'"


__all__ = ["DISTRIBUTION", "extra_hint", "installed_version"]
