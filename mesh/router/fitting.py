"""Fitting the capability index: genre means and the discriminative head over all agents.

Pure numpy on a snapshot of the index (`FitJob`), so the live router can run it in its fit
process (`mesh.router.fits`) while the event loop keeps adding, removing and learning; the
index installs the `FitResult` afterwards (`CapabilityIndex.apply_fit`). Between full fits
the live router refits the output layer alone on the hidden layers of the last full fit
(`fit_outputs`, a tenth of the cost). See `mesh.router.index` for how the fitted parts
enter the similarity.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from mesh.errors import FitInterrupted
from mesh.router.firstpass import FIRST_PASS_AGENTS, FIRST_PASS_ROWS, principal_basis

__all__ = [
    "FitConfig",
    "FitJob",
    "FitResult",
    "Head",
    "Yield",
    "fit_member",
    "fit_outputs",
    "fit_snapshot",
    "fits_head",
    "unit",
]

logger = logging.getLogger(__name__)

F32 = NDArray[np.float32]
#: asked between the steps of a fit: True gives the fit up (`FitInterrupted`)
Yield = Callable[[], bool]


def unit(rows: F32) -> F32:
    """`rows` scaled to unit L2 norm along the last axis (zero rows stay zero)."""
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out: F32 = (rows / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


@dataclass(frozen=True)
class FitConfig:
    """How the index builds prototypes, fits the discriminative head and mixes in the lexical
    channel.

    Defaults were chosen on CLINC150 with ``learn.jsonl`` as the development set for the
    cold index (never the validation set): see ``bench/routing_accuracy.py``.
    """

    #: the capability vector counts this many times in the centroid (examples count once)
    capability_weight: float = 3.0
    #: weight of the head's ``log p(agent | q)`` in the dense similarity (0 = no head);
    #: 0.05 to 0.2 tie on the dev set, 0.1 is the middle
    logprob_weight: float = 0.1
    #: the head is an ensemble of `members` one-hidden-layer networks (ReLU, `hidden`
    #: units) whose log-probabilities are averaged: one member is noisy, three are stable
    members: int = 3
    hidden: int = 128
    #: Adam steps per member on random mini-batches of `batch` texts: the cost of a fit
    #: does not grow with the number of learned texts
    steps: int = 600
    batch: int = 256
    learning_rate: float = 3e-3
    #: dropout on the hidden layer (the regulariser: five examples per agent are few;
    #: dropout on the input as well made no difference on the dev set)
    hidden_dropout: float = 0.5
    #: skip fitting when texts x agents exceeds this (cost grows with both)
    max_cells: int = 20_000_000
    #: share of the lexical coverage in the similarity, ``(1 - w) * dense + w * coverage``
    #: (0 = dense only); 0.3 to 0.5 tie on the dev set, 0.4 is the middle
    lexical_weight: float = 0.4
    #: from this many agents on, the fit computes a basis for the first pass
    #: (`mesh.router.firstpass`; 0: never, every decision reads every prototype)
    first_pass_agents: int = FIRST_PASS_AGENTS
    #: rows the first pass keeps for the exact pass
    first_pass_rows: int = FIRST_PASS_ROWS
    seed: int = 0


@dataclass(frozen=True)
class Head:
    """The fitted ensemble: shared hidden layers and one output row per agent.

    ``logits[m] = relu(q @ hidden_weights[m] + hidden_biases[m]) @ W_m + b_m`` where the
    agent's row of `weights` is ``W_0 | W_1 | ...`` (``members * hidden`` wide) and its row of
    `biases` holds ``b_0, b_1, ...``.
    """

    #: ``(members, dim, hidden)`` and ``(members, hidden)``
    hidden_weights: F32
    hidden_biases: F32
    #: ``(n, members * hidden)`` and ``(n, members)``, row order of `FitResult.agents`
    weights: F32
    biases: F32

    def side_by_side(self) -> tuple[F32, F32]:
        """The hidden layers as one ``(dim, members * hidden)`` matrix and its biases: one
        matrix-vector product gives every member's pre-activations."""
        members, dim, hidden = self.hidden_weights.shape
        weights = self.hidden_weights.transpose(1, 0, 2).reshape(dim, members * hidden)
        return np.ascontiguousarray(weights), self.hidden_biases.reshape(-1).copy()


@dataclass(frozen=True)
class FitResult:
    """What `fit_snapshot` computed from one snapshot of the index."""

    #: index-wide change counter at the snapshot
    version: int
    #: per fitted agent: the registration the fit saw (`AgentEntry.registered`)
    agents: dict[str, int]
    capability_mean: F32
    request_mean: F32
    #: None when fitting was skipped (too large, fewer than two agents, disabled)
    head: Head | None
    #: principal directions for the first pass (`principal_basis`; None below
    #: `FitConfig.first_pass_agents`, and in fits received from another router)
    basis: F32 | None = None

    @property
    def fitted(self) -> bool:
        return self.head is not None


@dataclass(frozen=True)
class FitJob:
    """What one fit reads, taken from the index on the event loop (`CapabilityIndex.fit_job`):
    plain arrays, so the fit may run in a thread or in the fit process (`mesh.router.fits`).

    `previous` set: the output layer alone is refitted on its hidden layers (`fit_outputs`);
    None: a full fit (`fit_snapshot`).
    """

    version: int
    agents: dict[str, int]
    capabilities: list[F32]
    requests: list[F32]
    dim: int
    cfg: FitConfig
    previous: FitResult | None = None

    @property
    def heavy(self) -> bool:
        """Whether the job fits a network (the output layer, or a head): seconds of CPU.
        A full fit without a head computes two means: milliseconds."""
        if self.previous is not None:
            return True
        agents = len(self.agents)
        return fits_head(agents, agents + sum(len(r) for r in self.requests), self.cfg)

    def run(self, yields: Yield | None = None) -> FitResult:
        """The fit (`yields` is asked between the steps of a full fit: `fit_member`)."""
        if self.previous is None:
            return fit_snapshot(
                self.version,
                self.agents,
                self.capabilities,
                self.requests,
                self.dim,
                self.cfg,
                yields=yields,
            )
        return fit_outputs(
            self.version, self.agents, self.requests, self.capabilities, self.previous, self.cfg
        )


def fits_head(agents: int, texts: int, cfg: FitConfig) -> bool:
    """Whether a full fit of `agents` agents and `texts` texts fits a head: two agents at
    least, a head weight, and texts x agents within `FitConfig.max_cells`."""
    return agents >= 2 and cfg.logprob_weight > 0 and texts * agents <= cfg.max_cells


def fit_snapshot(
    version: int,
    agents: dict[str, int],
    capabilities: Sequence[F32],
    requests: Sequence[F32],
    dim: int,
    cfg: FitConfig,
    *,
    yields: Yield | None = None,
) -> FitResult:
    """Genre means, then the head over all agents on their own centred texts.

    `capabilities` and `requests` (example and learned vectors) are per agent, in the order
    of `agents`. The head is skipped past `FitConfig.max_cells` (texts x agents), for fewer
    than two agents or when ``logprob_weight`` is 0. On two cores: 2-3 s for 150 agents
    and ~7 s for 1,000, whatever their number of learned texts.
    """
    if not agents:
        zero = np.zeros(dim, np.float32)
        return FitResult(version, agents, zero, zero, None)
    cap_mean = np.mean(capabilities, axis=0).astype(np.float32)
    req_all = np.concatenate(list(requests))
    req_mean = (
        req_all.mean(axis=0).astype(np.float32) if len(req_all) else np.zeros(dim, np.float32)
    )
    n = len(agents)
    texts = n + len(req_all)
    basis = (
        principal_basis(req_all, req_mean, seed=cfg.seed)
        if 0 < cfg.first_pass_agents <= n
        else None
    )
    if not fits_head(n, texts, cfg):
        if texts * n > cfg.max_cells:
            logger.info("head fit skipped: %d texts x %d agents over max_cells", texts, n)
        return FitResult(version, agents, cap_mean, req_mean, None, basis)
    # the head reads queries, which are centred by the request mean: every text it is fitted
    # on is centred the same way (capability texts too; centred by their own mean they
    # would sit apart from every query, 0.5 point lower on the dev set)
    cap_c = unit(np.stack(capabilities) - req_mean)
    req_c = unit(req_all - req_mean) if len(req_all) else np.empty((0, dim), np.float32)
    owner = np.repeat(np.arange(n), [len(r) for r in requests])
    x = np.concatenate([cap_c, req_c])
    y = np.concatenate([np.arange(n), owner])
    members = [
        fit_member(x, y, n, cfg, seed=cfg.seed + m, yields=yields) for m in range(cfg.members)
    ]
    head = Head(
        hidden_weights=np.stack([m[0] for m in members]),
        hidden_biases=np.stack([m[1] for m in members]),
        weights=np.concatenate([m[2].T for m in members], axis=1),
        biases=np.stack([m[3] for m in members], axis=1),
    )
    return FitResult(version, agents, cap_mean, req_mean, head, basis)


def fit_member(
    x: F32,
    y: NDArray[np.int64],
    n: int,
    cfg: FitConfig,
    *,
    seed: int,
    yields: Yield | None = None,
) -> tuple[F32, F32, F32, F32]:
    """One network ``relu(x W1 + b1) W2 + b2`` fitted with Adam and hidden dropout on
    mini-batches. Returns ``W1 (dim, hidden), b1, W2 (hidden, n), b2``.

    Raises:
        FitInterrupted: `yields` answered True before a step (asked before each one).
    """
    rng = np.random.default_rng(seed)
    dim, hidden = x.shape[1], cfg.hidden
    params = [
        rng.normal(0.0, np.sqrt(2.0 / dim), (dim, hidden)).astype(np.float32),
        np.zeros(hidden, np.float32),
        rng.normal(0.0, np.sqrt(1.0 / hidden), (hidden, n)).astype(np.float32),
        np.zeros(n, np.float32),
    ]
    first = [np.zeros_like(p) for p in params]
    second = [np.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    keep = np.float32(1.0 - cfg.hidden_dropout)
    size = min(cfg.batch, len(x))
    rows = np.arange(size)
    for t in range(1, cfg.steps + 1):
        if yields is not None and yields():
            raise FitInterrupted(f"fit given up at step {t} of {cfg.steps}")
        pick = rng.choice(len(x), size=size, replace=False)
        xb = x[pick]
        pre = xb @ params[0]
        pre += params[1]
        mask = rng.random(pre.shape, dtype=np.float32) < keep
        h = np.maximum(pre, 0)
        h *= mask
        h /= keep
        z = h @ params[2]
        z += params[3]
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        z[rows, y[pick]] -= 1.0
        z /= np.float32(size)  # the gradient of the mean cross-entropy w.r.t. the logits
        gh = z @ params[2].T
        gh *= mask & (pre > 0)
        gh /= keep
        grads = (xb.T @ gh, gh.sum(axis=0), h.T @ z, z.sum(axis=0))
        # Adam with the bias corrections folded into the step size
        step = np.float32(cfg.learning_rate * np.sqrt(1 - beta2**t) / (1 - beta1**t))
        for param, grad, m, v in zip(params, grads, first, second, strict=True):
            m *= beta1
            m += (1 - beta1) * grad
            v *= beta2
            grad *= grad
            v += (1 - beta2) * grad
            param -= step * m / (np.sqrt(v) + eps)
    return params[0], params[1], params[2], params[3]


def fit_outputs(
    version: int,
    agents: dict[str, int],
    requests: Sequence[F32],
    capabilities: Sequence[F32],
    previous: FitResult,
    cfg: FitConfig,
) -> FitResult:
    """A cheap refit: `previous`'s genre means and hidden layers, new output rows.

    Each member's hidden layer is frozen; its features of every text are computed once,
    then the output layer alone is fitted with the same loss, dropout and optimiser for
    ``cfg.steps // 4`` steps, starting from `previous`'s row of each agent it fitted (a new
    agent starts at zero). About a tenth of `fit_snapshot`'s cost. Requires
    `previous.head`.
    """
    head = previous.head
    if head is None:
        raise ValueError("fit_outputs needs a previous head")
    n = len(agents)
    req_mean = previous.request_mean
    cap_c = unit(np.stack(capabilities) - req_mean)
    req_all = np.concatenate(list(requests))
    req_c = unit(req_all - req_mean)
    owner = np.repeat(np.arange(n), [len(r) for r in requests])
    x = np.concatenate([cap_c, req_c])
    y = np.concatenate([np.arange(n), owner])
    members, _, hidden = head.hidden_weights.shape
    known = {a: i for i, a in enumerate(previous.agents)}
    weights = np.zeros((n, members * hidden), np.float32)
    biases = np.zeros((n, members), np.float32)
    for row, agent_id in enumerate(agents):
        i = known.get(agent_id)
        if i is not None:
            weights[row], biases[row] = head.weights[i], head.biases[i]
    steps = max(cfg.steps // 4, 1)
    for m in range(members):
        features = np.maximum(x @ head.hidden_weights[m] + head.hidden_biases[m], 0)
        cols = slice(m * hidden, (m + 1) * hidden)
        w2, b2 = _fit_output(
            features, y, weights[:, cols].T.copy(), biases[:, m].copy(), cfg, steps, cfg.seed + m
        )
        weights[:, cols], biases[:, m] = w2.T, b2
    new_head = Head(head.hidden_weights, head.hidden_biases, weights, biases)
    return FitResult(version, agents, previous.capability_mean, req_mean, new_head, previous.basis)


def _fit_output(
    features: F32, y: NDArray[np.int64], w2: F32, b2: F32, cfg: FitConfig, steps: int, seed: int
) -> tuple[F32, F32]:
    """`fit_member`'s output layer alone on fixed hidden `features` (Adam, dropout)."""
    rng = np.random.default_rng(seed)
    params = [w2, b2]
    first = [np.zeros_like(p) for p in params]
    second = [np.zeros_like(p) for p in params]
    beta1, beta2, eps = 0.9, 0.999, 1e-8
    keep = np.float32(1.0 - cfg.hidden_dropout)
    size = min(cfg.batch, len(features))
    rows = np.arange(size)
    for t in range(1, steps + 1):
        pick = rng.choice(len(features), size=size, replace=False)
        h = features[pick]
        h = h * (rng.random(h.shape, dtype=np.float32) < keep)
        h /= keep
        z = h @ params[0]
        z += params[1]
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)
        z[rows, y[pick]] -= 1.0
        z /= np.float32(size)
        grads = (h.T @ z, z.sum(axis=0))
        step = np.float32(cfg.learning_rate * np.sqrt(1 - beta2**t) / (1 - beta1**t))
        for param, grad, mom, var in zip(params, grads, first, second, strict=True):
            mom *= beta1
            mom += (1 - beta1) * grad
            var *= beta2
            grad *= grad
            var += (1 - beta2) * grad
            param -= step * mom / (np.sqrt(var) + eps)
    return params[0], params[1]
