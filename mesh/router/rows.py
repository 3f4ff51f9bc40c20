"""Per-agent numpy arrays kept row-aligned with the capability index: grown and moved
together, whichever table (index vectors, runtime stats, head rows) owns them; and the
choice of a decision's best rows among them."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

__all__ = ["best_rows", "grow_rows", "move_row"]

Rows = NDArray[np.intp]


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


def best_rows(
    values: NDArray[np.float32],
    k: int,
    *,
    pool: Rows | None = None,
    eligible: NDArray[np.bool_] | None = None,
) -> Rows:
    """The positions of the `k` highest `values` (among `pool` when given), in no order.

    `eligible` (a mask over `values`) marks the positions a decision may choose; when it
    leaves some out, the `k` best eligible positions are added (sorted union), so positions
    that outrank them but cannot be chosen never crowd them out.
    """
    top = _top(values, pool, k)
    if eligible is None:
        return top
    allowed = np.flatnonzero(eligible) if pool is None else pool[eligible[pool]]
    if not len(allowed):
        return top
    both: Rows = np.union1d(top, _top(values, allowed, k))
    return both


def _top(values: NDArray[np.float32], pool: Rows | None, k: int) -> Rows:
    if pool is None:
        if len(values) <= k:
            return np.arange(len(values))
        top: Rows = np.argpartition(-values, k)[:k]
        return top
    if len(pool) <= k:
        return pool
    picked: Rows = pool[np.argpartition(-values[pool], k)[:k]]
    return picked
