"""Fitting the capability index: genre means and the softmax layer over every agent's texts.

Pure numpy on a snapshot of the index (`fit_snapshot`), so the live router can run it in a
worker thread while the event loop keeps adding, removing and learning; the index installs
the `FitResult` afterwards (`CapabilityIndex.apply_fit`). See `mesh.router.index` for how
the fitted parts enter the similarity.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

__all__ = ["FitConfig", "FitResult", "fit_snapshot", "fit_softmax", "unit"]

logger = logging.getLogger(__name__)

F32 = NDArray[np.float32]


def unit(rows: F32) -> F32:
    """`rows` scaled to unit L2 norm along the last axis (zero rows stay zero)."""
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out: F32 = (rows / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


@dataclass(frozen=True)
class FitConfig:
    """How the index builds prototypes, fits the softmax term and mixes in the lexical channel.

    Defaults were chosen on CLINC150 with ``learn.jsonl`` as the development set for the
    cold index (never the validation set): see ``bench/routing_accuracy.py``.
    """

    #: the capability vector counts this many times in the centroid (examples count once)
    capability_weight: float = 3.0
    #: weight of ``log p(agent | q)`` in the dense similarity (0 = centroid cosine only)
    logprob_weight: float = 0.1
    #: logit scale of the softmax at initialisation (centroid cosine times this)
    scale: float = 30.0
    #: Adam steps; few on purpose (early stopping is the regulariser)
    steps: int = 100
    learning_rate: float = 0.05
    #: skip fitting when texts x agents exceeds this (cost grows with both)
    max_cells: int = 20_000_000
    #: share of the lexical coverage in the similarity, ``(1 - w) * dense + w * coverage``
    #: (0 = dense only); 0.3 to 0.5 tie on the dev set, 0.4 is the middle
    lexical_weight: float = 0.4


@dataclass(frozen=True)
class FitResult:
    """What `fit_snapshot` computed from one snapshot of the index."""

    #: index-wide change counter at the snapshot
    version: int
    #: per fitted agent: its change counter at the snapshot
    agents: dict[str, int]
    capability_mean: F32
    request_mean: F32
    #: ``(len(agents), dim)`` softmax weights and ``(len(agents),)`` biases, row order of
    #: `agents`; None when fitting was skipped (too large, fewer than two agents, disabled)
    weights: F32 | None
    biases: F32 | None

    @property
    def fitted(self) -> bool:
        return self.weights is not None


def fit_snapshot(
    version: int,
    agents: dict[str, int],
    capabilities: Sequence[F32],
    requests: Sequence[F32],
    dim: int,
    cfg: FitConfig,
) -> FitResult:
    """Genre means, then the softmax over all agents on their own centred texts.

    `capabilities` and `requests` (example and learned vectors) are per agent, in the order
    of `agents`. The softmax starts at ``scale * centroid`` and is early-stopped; it is
    skipped past `FitConfig.max_cells` (texts x agents), for fewer than two agents or when
    ``logprob_weight`` is 0. About half a second for 150 agents with 25 texts each.
    """
    if not agents:
        zero = np.zeros(dim, np.float32)
        return FitResult(version, agents, zero, zero, None, None)
    cap_mean = np.mean(capabilities, axis=0).astype(np.float32)
    req_all = np.concatenate(list(requests))
    req_mean = (
        req_all.mean(axis=0).astype(np.float32) if len(req_all) else np.zeros(dim, np.float32)
    )
    n = len(agents)
    texts = n + len(req_all)
    if n < 2 or cfg.logprob_weight <= 0 or texts * n > cfg.max_cells:
        if texts * n > cfg.max_cells:
            logger.info("softmax fit skipped: %d texts x %d agents over max_cells", texts, n)
        return FitResult(version, agents, cap_mean, req_mean, None, None)
    cap_c = unit(np.stack(capabilities) - cap_mean)
    req_c = unit(req_all - req_mean) if len(req_all) else np.empty((0, dim), np.float32)
    owner = np.repeat(np.arange(n), [len(r) for r in requests])
    centroids = np.zeros((n, dim), np.float32)
    np.add.at(centroids, owner, req_c)
    centroids = unit(centroids + np.float32(cfg.capability_weight) * cap_c)
    x = np.concatenate([cap_c, req_c])
    y = np.concatenate([np.arange(n), owner])
    w, b = fit_softmax(x, y, (centroids * cfg.scale).T, steps=cfg.steps, lr=cfg.learning_rate)
    return FitResult(version, agents, cap_mean, req_mean, w.T.copy(), b)


def fit_softmax(
    x: F32, y: NDArray[np.int64], w0: F32, *, steps: int, lr: float
) -> tuple[F32, F32]:
    """Multinomial logistic regression from `w0` with Adam: ``(dim, n)`` weights, biases."""
    w = w0.astype(np.float32, copy=True)
    b = np.zeros(w.shape[1], np.float32)
    onehot = np.zeros((x.shape[0], w.shape[1]), np.float32)
    onehot[np.arange(x.shape[0]), y] = 1.0
    m_w, v_w = np.zeros_like(w), np.zeros_like(w)
    m_b, v_b = np.zeros_like(b), np.zeros_like(b)
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    for t in range(1, steps + 1):
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) / x.shape[0]
        for param, grad, m, v in ((w, x.T @ g, m_w, v_w), (b, g.sum(axis=0), m_b, v_b)):
            m *= beta1
            m += (1 - beta1) * grad
            v *= beta2
            v += (1 - beta2) * grad * grad
            m_hat = m / (1 - beta1**t)
            v_hat = v / (1 - beta2**t)
            param -= lr * m_hat / (np.sqrt(v_hat) + eps)
    return w, b
