"""Per-agent numpy arrays kept row-aligned with the capability index: grown and moved
together, whichever table (index vectors, runtime stats, head rows) owns them."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

__all__ = ["grow_rows", "move_row"]


def grow_rows(owner: object, names: Iterable[str], capacity: int) -> None:
    """Give each array attribute `names` of `owner` at least `capacity` rows (new rows 0)."""
    for name in names:
        old = getattr(owner, name)
        if len(old) >= capacity:
            continue
        new = np.zeros((capacity, *old.shape[1:]), old.dtype)
        new[: len(old)] = old
        setattr(owner, name, new)


def move_row(owner: object, names: Iterable[str], source: int, target: int) -> None:
    """Copy row `source` onto row `target` in each array attribute `names` of `owner`."""
    for name in names:
        arr = getattr(owner, name)
        arr[target] = arr[source]
