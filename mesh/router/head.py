"""The fitted head as the index uses it: one output row per agent, row-aligned with the
capability index, and the shared hidden layers; `HeadTable.logp` evaluates it for the
candidate rows of one query.

A row holds the head's weights for its agent from the last fit that saw the agent's
current registration (`HeadTable.fitted`); a row learned since keeps them (one fit old,
still this agent's). On rows without weights the head abstains: they get the best log
probability among the fitted rows, so they compete on cosine and coverage alone until the
next fit.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from mesh.router.fitting import Head
from mesh.router.rows import grow_rows, move_row

__all__ = ["HeadTable"]

F32 = NDArray[np.float32]


class HeadTable:
    """Per-row output weights of the head plus its hidden layers (None: no head in use)."""

    ARRAYS = ("weights", "biases", "fitted")

    def __init__(self, capacity: int, members: int, hidden: int) -> None:
        self.members = members
        self.weights = np.zeros((capacity, members * hidden), np.float32)
        self.biases = np.zeros((capacity, members), np.float32)
        self.fitted = np.zeros(capacity, np.bool_)
        #: the hidden layers side by side, ``(dim, members * hidden)`` and their biases
        self._hidden: tuple[F32, F32] | None = None

    @property
    def active(self) -> bool:
        return self._hidden is not None

    def grow(self, capacity: int) -> None:
        grow_rows(self, self.ARRAYS, capacity)

    def move(self, source: int, target: int) -> None:
        move_row(self, self.ARRAYS, source, target)

    def install(self, head: Head | None) -> None:
        """Use `head`'s hidden layers (None: the head is off); rows are set one by one."""
        self._hidden = None if head is None else head.side_by_side()

    def set_row(self, row: int, head: Head, i: int) -> None:
        """Row `row` takes the agent at position `i` of the fit that produced `head`."""
        self.weights[row] = head.weights[i]
        self.biases[row] = head.biases[i]
        self.fitted[row] = True

    def clear_row(self, row: int) -> None:
        self.fitted[row] = False

    def logp(self, query: F32, rows: NDArray[np.intp]) -> F32:
        """Member-averaged ``log p(agent | query)`` over `rows`, normalised over them.

        `query` is centred and unit, as the head was fitted. Requires `active`.
        """
        if self._hidden is None:
            raise RuntimeError("HeadTable.logp without an installed head")
        hidden_weights, hidden_biases = self._hidden
        h = query @ hidden_weights
        h += hidden_biases
        np.maximum(h, 0, out=h)
        fitted = self.fitted[rows]
        every = bool(fitted.all())
        if not every and not fitted.any():
            return np.zeros(len(rows), np.float32)
        known = rows if every else rows[fitted]
        z = np.einsum(
            "rmh,mh->rm",
            self.weights[known].reshape(len(known), self.members, -1),
            h.reshape(self.members, -1),
        )
        z += self.biases[known]
        top = z.max(axis=0)
        lse = top + np.log(np.exp(z - top).sum(axis=0))
        known_logp: F32 = (z - lse).mean(axis=1).astype(np.float32)
        if every:
            return known_logp
        logp = np.zeros(len(rows), np.float32)
        logp[fitted] = known_logp
        logp[~fitted] = known_logp.max()
        return logp
