"""The first pass over a large index: prototypes projected onto a few principal directions.

A decision's one pass over every agent (``centroids @ q``) reads the whole prototype
matrix: at 10,000 agents of 512 dimensions that is 20 MB per decision, bound by memory,
about 1 ms on one core. Past `FIRST_PASS_AGENTS` agents the index reads instead each
prototype's coordinates along the `FIRST_PASS_DIM` principal directions of the texts it was
fitted on (a quarter of the bytes, which stay in cache), takes the `FIRST_PASS_ROWS` rows
with the best approximate cosine, and computes the exact cosine of those rows only.

Everything after the first pass (head, lexical coverage, similarity) reads the exact rows,
so the first pass can only change a decision by leaving the right agent out of the rows it
keeps; `bench/first_pass.py` measures how often that happens on agents built from CLINC150.
The basis comes from the fit (`principal_basis`, run off the event loop with the genre
means); rows changed between fits are projected with the basis they find. Pure numpy.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from mesh.router.rows import best_rows, grow_rows, move_row

__all__ = [
    "FIRST_PASS_AGENTS",
    "FIRST_PASS_DIM",
    "FIRST_PASS_ROWS",
    "FirstPass",
    "principal_basis",
]

F32 = NDArray[np.float32]

#: the first pass is used from this many agents on (`FitConfig.first_pass_agents`; below,
#: one exact pass costs less than 0.3 ms and the first pass would save nothing worth its
#: approximation)
FIRST_PASS_AGENTS = 2_048
#: principal directions kept: 10,000 x 128 float32 is 5 MB, which stays in cache
FIRST_PASS_DIM = 128
#: rows whose exact cosine is computed after the first pass (`FitConfig.first_pass_rows`;
#: the head and the lexical channel then take their best `CANDIDATE_ROWS` among them)
FIRST_PASS_ROWS = 512
#: texts the basis is computed from, at most (a uniform sample beyond)
BASIS_SAMPLE = 8_192


def principal_basis(
    texts: F32,
    mean: F32,
    dim: int = FIRST_PASS_DIM,
    *,
    seed: int = 0,
    sample: int = BASIS_SAMPLE,
) -> F32 | None:
    """``(d, dim)`` orthonormal columns: the top eigenvectors of the second moment of the
    texts centred by `mean` and scaled to unit length, as prototypes and queries are.

    Projecting a prototype and a query onto these columns keeps as much of their dot
    product as `dim` directions can (fewer texts than `dim`: their whole span, completed
    by arbitrary orthonormal directions). At most `sample` texts are read (a seeded
    uniform sample). None without texts, or when the texts have no more than `dim`
    dimensions (nothing to save).
    """
    if not len(texts) or texts.shape[1] <= dim:
        return None
    if len(texts) > sample:
        pick = np.random.default_rng(seed).choice(len(texts), sample, replace=False)
        texts = texts[np.sort(pick)]
    centred = texts - mean
    centred /= np.maximum(np.linalg.norm(centred, axis=1, keepdims=True), 1e-12)
    second = centred.T @ centred
    _, vectors = np.linalg.eigh(second.astype(np.float64))
    basis: F32 = np.ascontiguousarray(vectors[:, ::-1][:, :dim], np.float32)
    return basis


class FirstPass:
    """Per-row projected prototypes, row-aligned with the capability index."""

    ARRAYS = ("coords",)

    def __init__(self, capacity: int, dim: int = FIRST_PASS_DIM) -> None:
        self.coords = np.zeros((capacity, dim), np.float32)
        #: ``(d, dim)``: None until a fit gave one (the index then scores every row exactly)
        self.basis: F32 | None = None

    def grow(self, capacity: int) -> None:
        grow_rows(self, self.ARRAYS, capacity)

    def move(self, source: int, target: int) -> None:
        move_row(self, self.ARRAYS, source, target)

    def install(self, basis: F32, prototypes: F32) -> None:
        """Use `basis` and project every row of `prototypes` (the index's first rows)."""
        self.basis = basis
        self.coords[: len(prototypes)] = prototypes @ basis

    def set_row(self, row: int, prototype: F32) -> None:
        if self.basis is not None:
            self.coords[row] = prototype @ self.basis

    def rows(
        self, query: F32, n: int, keep: int, eligible: NDArray[np.bool_] | None = None
    ) -> NDArray[np.intp] | None:
        """The `keep` rows of the first `n` with the best approximate cosine to `query`
        (centred, unit), and the `keep` best of the `eligible` ones when it leaves some
        out (`best_rows`); None when the whole pass is due (no basis, few rows)."""
        if self.basis is None or n <= keep:
            return None
        approx = self.coords[:n] @ (query @ self.basis)
        return best_rows(approx, keep, eligible=eligible)
