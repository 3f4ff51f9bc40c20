"""The capability index: every live agent's vectors, stacked so a decision is one numpy pass.

Per agent it keeps the capability-text vector, the registered example vectors and a
bounded reservoir of learned vectors (texts of tasks the agent completed well). From
these it derives one unit *prototype* row per agent; `prototypes` is the ``(n, dim)``
matrix the scorer multiplies with the query vector.

Prototype method (measured with ``mesh calibrate``, see ``bench/routing_accuracy.py``):
the normalised centroid of all the agent's vectors, mixed with a discriminative
direction fitted by `refit()`: a softmax layer over all agents, initialised from the
centroids and trained on every agent's own texts. Rows stay unit-norm, so the
similarity is a cosine in [-1, 1] and an absolute threshold keeps its meaning.

Runtime stats (load, success rate...) live here too, in arrays aligned with the rows,
so scoring 10,000 agents never walks Python objects. No I/O: pure numpy.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from mesh.router.embedding import Embedder

logger = logging.getLogger(__name__)

F32 = NDArray[np.float32]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)

#: statuses an agent can be routed to
ROUTABLE = "up"


def tokens(text: str) -> list[str]:
    """Lower-case word tokens, the unit of keyword matching."""
    return _WORD.findall(text.lower())


def _unit(rows: F32) -> F32:
    norms = np.linalg.norm(rows, axis=-1, keepdims=True)
    out: F32 = (rows / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


@dataclass(frozen=True)
class FitConfig:
    """How `CapabilityIndex.refit()` fits the discriminative prototypes."""

    #: weight of the fitted direction against the centroid (0 = nearest centroid)
    mix: float = 1.0
    #: initial logit scale of the softmax (centroid cosine times this)
    scale: float = 10.0
    steps: int = 300
    learning_rate: float = 0.05
    #: skip fitting when texts x agents exceeds this (cost grows with both)
    max_cells: int = 20_000_000


@dataclass(frozen=True)
class AgentStats:
    """Runtime facts about one agent that scoring weighs besides similarity."""

    load: int = 0
    max_concurrency: int = 1
    #: share of recent tasks that succeeded, in [0, 1]
    success_rate: float = 1.0
    #: seconds since the agent last got a task (large when it never did)
    idle_s: float = 1e9
    status: str = ROUTABLE
    priority: int = 0
    #: tasks completed so far; below `cold_tasks` the agent is "cold" (exploration)
    completed: int = 0


@dataclass
class AgentEntry:
    """Everything the index holds about one agent."""

    agent_id: str
    capability: F32
    examples: F32
    tags: dict[str, str] = field(default_factory=dict)
    keywords: tuple[tuple[str, ...], ...] = ()
    learned: list[F32] = field(default_factory=list)
    #: vectors offered to the reservoir so far (reservoir sampling needs it)
    learned_seen: int = 0
    bad: int = 0

    def vectors(self) -> F32:
        rows = [self.capability[None, :], self.examples]
        if self.learned:
            rows.append(np.stack(self.learned))
        return np.concatenate(rows).astype(np.float32, copy=False)


def embed_registration(
    embedder: Embedder, capability_text: str, examples: Sequence[str]
) -> tuple[F32, F32]:
    """Embed a registration in one batch: ``(capability vector, example matrix)``."""
    out = embedder.embed([capability_text, *examples])
    return out[0], out[1:]


class CapabilityIndex:
    """Stacked per-agent vectors and stats; rows are added, replaced and removed in O(dim)."""

    def __init__(
        self, dim: int, *, memory_size: int = 50, seed: int = 0, fit: FitConfig | None = None
    ) -> None:
        self.dim = dim
        self.memory_size = memory_size
        self.fit_config = fit or FitConfig()
        self._rng = np.random.default_rng(seed)
        self._entries: list[AgentEntry] = []
        self._rows: dict[str, int] = {}
        cap = 16
        self._centroids = np.zeros((cap, dim), np.float32)
        self._fitted = np.zeros((cap, dim), np.float32)
        self._protos = np.zeros((cap, dim), np.float32)
        self._load = np.zeros(cap, np.float32)
        self._max_conc = np.ones(cap, np.float32)
        self._success = np.ones(cap, np.float32)
        self._idle = np.full(cap, 1e9, np.float32)
        self._routable = np.zeros(cap, np.bool_)
        self._priority = np.zeros(cap, np.float32)
        self._completed = np.zeros(cap, np.int64)
        self._by_tag: dict[tuple[str, str], set[str]] = {}
        self._by_keyword: dict[str, set[str]] = {}
        self._ids: tuple[str, ...] | None = None
        #: True when agents or memories changed since the last `refit()`
        self.dirty = False

    # --- views ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._rows

    @property
    def ids(self) -> tuple[str, ...]:
        """Agent ids in row order (cached until the membership changes)."""
        if self._ids is None:
            self._ids = tuple(e.agent_id for e in self._entries)
        return self._ids

    def entry(self, agent_id: str) -> AgentEntry:
        return self._entries[self._rows[agent_id]]

    def row(self, agent_id: str) -> int:
        return self._rows[agent_id]

    @property
    def prototypes(self) -> F32:
        """``(n, dim)`` unit rows: the similarity of a query to agent i is ``protos[i] @ q``."""
        return self._protos[: len(self)]

    @property
    def centroids(self) -> F32:
        return self._centroids[: len(self)]

    @property
    def load(self) -> F32:
        return self._load[: len(self)]

    @property
    def max_concurrency(self) -> F32:
        return self._max_conc[: len(self)]

    @property
    def success_rate(self) -> F32:
        return self._success[: len(self)]

    @property
    def idle_s(self) -> F32:
        return self._idle[: len(self)]

    @property
    def routable(self) -> NDArray[np.bool_]:
        return self._routable[: len(self)]

    @property
    def priority(self) -> F32:
        return self._priority[: len(self)]

    @property
    def completed(self) -> NDArray[np.int64]:
        return self._completed[: len(self)]

    # --- membership ----------------------------------------------------------------------
    def add(
        self,
        agent_id: str,
        capability: F32,
        examples: F32,
        *,
        tags: Mapping[str, str] | None = None,
        keywords: Iterable[str] = (),
        stats: AgentStats | None = None,
    ) -> None:
        """Add or replace an agent. A replaced agent keeps its learned memory and stats."""
        examples = np.asarray(examples, np.float32).reshape(-1, self.dim)
        capability = np.asarray(capability, np.float32).reshape(self.dim)
        kws = tuple(t for t in (tuple(tokens(k)) for k in keywords) if t)
        entry = AgentEntry(agent_id, capability, examples, dict(tags or {}), kws)
        old_row = self._rows.get(agent_id)
        if old_row is not None:
            old = self._entries[old_row]
            entry.learned, entry.learned_seen, entry.bad = old.learned, old.learned_seen, old.bad
            self._unindex(old)
            row = old_row
            self._entries[row] = entry
            self._fitted[row] = 0.0  # new texts: the old fitted direction is stale
        else:
            row = len(self._entries)
            self._grow(row + 1)
            self._fitted[row] = 0.0  # a freed row may hold a removed agent's direction
            self._entries.append(entry)
            self._rows[agent_id] = row
            self.set_stats(agent_id, stats or AgentStats())
        if stats is not None:
            self.set_stats(agent_id, stats)
        for k, v in entry.tags.items():
            self._by_tag.setdefault((k, v), set()).add(agent_id)
        for kw in entry.keywords:
            self._by_keyword.setdefault(kw[0], set()).add(agent_id)
        self._refresh_row(row, fitted=None)
        self._ids = None
        self.dirty = True

    def remove(self, agent_id: str) -> bool:
        """Drop an agent (its row is filled by the last one). False when unknown."""
        row = self._rows.pop(agent_id, None)
        if row is None:
            return False
        self._unindex(self._entries[row])
        last = len(self._entries) - 1
        if row != last:
            moved = self._entries[last]
            self._entries[row] = moved
            self._rows[moved.agent_id] = row
            for arr in self._arrays():
                arr[row] = arr[last]
        self._entries.pop()
        self._ids = None
        self.dirty = True
        return True

    def set_stats(self, agent_id: str, stats: AgentStats) -> None:
        row = self._rows[agent_id]
        self._load[row] = stats.load
        self._max_conc[row] = max(stats.max_concurrency, 1)
        self._success[row] = stats.success_rate
        self._idle[row] = stats.idle_s
        self._routable[row] = stats.status == ROUTABLE
        self._priority[row] = stats.priority
        self._completed[row] = stats.completed

    def stats(self, agent_id: str) -> AgentStats:
        row = self._rows[agent_id]
        return AgentStats(
            load=int(self._load[row]),
            max_concurrency=int(self._max_conc[row]),
            success_rate=float(self._success[row]),
            idle_s=float(self._idle[row]),
            status=ROUTABLE if self._routable[row] else "unavailable",
            priority=int(self._priority[row]),
            completed=int(self._completed[row]),
        )

    # --- rule filter and keywords ----------------------------------------------------------
    def tag_mask(self, required: Mapping[str, str]) -> NDArray[np.bool_]:
        """Rows whose tags contain every ``k=v`` of `required`."""
        mask = np.zeros(len(self), np.bool_)
        ids: set[str] | None = None
        for k, v in required.items():
            have = self._by_tag.get((k, str(v)), set())
            ids = set(have) if ids is None else ids & have
        if ids is None:
            mask[:] = True
            return mask
        mask[[self._rows[a] for a in ids]] = True
        return mask

    def keyword_hits(self, query_text: str) -> NDArray[np.float32]:
        """Per row: 1.0 when one of the agent's keywords (all its words) is in the query."""
        hits = np.zeros(len(self), np.float32)
        words = tokens(query_text)
        if not self._by_keyword or not words:
            return hits
        present = set(words)
        for word in present:
            for agent_id in self._by_keyword.get(word, ()):
                row = self._rows[agent_id]
                if hits[row] == 0 and any(
                    kw[0] == word and present.issuperset(kw)
                    for kw in self._entries[row].keywords
                ):
                    hits[row] = 1.0
        return hits

    # --- learning ------------------------------------------------------------------------
    def learn(self, agent_id: str, vec: F32, *, good: bool) -> None:
        """Record an outcome: good adds `vec` to the agent's bounded reservoir, bad counts.

        The reservoir is a uniform sample (Algorithm R) of every good vector seen, drawn
        with the index's seeded RNG, so replaying the same outcomes gives the same memory.
        Unknown agents are ignored (they may have deregistered meanwhile).
        """
        row = self._rows.get(agent_id)
        if row is None:
            logger.debug("learn for unknown agent=%s ignored", agent_id)
            return
        entry = self._entries[row]
        if not good:
            entry.bad += 1
            return
        v = np.asarray(vec, np.float32).reshape(self.dim)
        entry.learned_seen += 1
        if len(entry.learned) < self.memory_size:
            entry.learned.append(v)
        else:
            slot = int(self._rng.integers(entry.learned_seen))
            if slot < self.memory_size:
                entry.learned[slot] = v
            else:
                return
        self._refresh_row(row, fitted=None)
        self.dirty = True

    # --- prototypes ----------------------------------------------------------------------
    def refit(self) -> bool:
        """Fit the discriminative directions on every agent's texts; False when skipped.

        A softmax layer over all agents (initialised from the centroid cosines, no
        regularisation) trained with Adam for `FitConfig.steps`. Until the next refit,
        new or changed agents use their centroid alone. Costs about a second for 150
        agents with 5 examples; skipped past `FitConfig.max_cells`.
        """
        cfg = self.fit_config
        n = len(self)
        self.dirty = False
        if n < 2 or cfg.mix <= 0:
            for row in range(n):
                self._refresh_row(row, fitted=np.zeros(self.dim, np.float32))
            return False
        blocks = [e.vectors() for e in self._entries]
        x = np.concatenate(blocks)
        y = np.repeat(np.arange(n), [len(b) for b in blocks])
        if x.shape[0] * n > cfg.max_cells:
            logger.info("refit skipped: %d texts x %d agents over max_cells", x.shape[0], n)
            for row in range(n):
                self._refresh_row(row, fitted=np.zeros(self.dim, np.float32))
            return False
        w0 = (self.centroids * cfg.scale).T.copy()
        w = _fit_softmax(x, y, w0, steps=cfg.steps, lr=cfg.learning_rate)
        fitted = _unit(w.T)
        for row in range(n):
            self._refresh_row(row, fitted=fitted[row])
        return True

    def _refresh_row(self, row: int, *, fitted: F32 | None) -> None:
        entry = self._entries[row]
        centroid = _unit(entry.vectors().mean(axis=0))
        self._centroids[row] = centroid
        if fitted is None:
            # unchanged direction from the last fit; new agents have none yet
            fitted = self._fitted[row] if self._fitted[row].any() else centroid
        self._fitted[row] = fitted
        self._protos[row] = _unit(centroid + self.fit_config.mix * fitted)

    # --- storage -------------------------------------------------------------------------
    def _arrays(self) -> list[NDArray[np.generic]]:
        return [
            self._centroids, self._fitted, self._protos, self._load, self._max_conc,
            self._success, self._idle, self._routable, self._priority, self._completed,
        ]

    def _grow(self, need: int) -> None:
        cap = self._protos.shape[0]
        if need <= cap:
            return
        new_cap = max(need, cap * 2)
        for name in (
            "_centroids", "_fitted", "_protos", "_load", "_max_conc", "_success", "_idle",
            "_routable", "_priority", "_completed",
        ):
            old = getattr(self, name)
            new = np.zeros((new_cap, *old.shape[1:]), old.dtype)
            new[:cap] = old
            setattr(self, name, new)

    def _unindex(self, entry: AgentEntry) -> None:
        for k, v in entry.tags.items():
            self._by_tag.get((k, v), set()).discard(entry.agent_id)
        for kw in entry.keywords:
            self._by_keyword.get(kw[0], set()).discard(entry.agent_id)


def _fit_softmax(x: F32, y: NDArray[np.int64], w0: F32, *, steps: int, lr: float) -> F32:
    """Multinomial logistic regression from `w0` with Adam; returns ``(dim, n)`` weights."""
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
    return w
