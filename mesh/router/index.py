"""The capability index: every live agent's vectors, stacked so a decision is one numpy pass.

Per agent it keeps the capability-text vector, the registered example vectors, a bounded
reservoir of learned vectors (texts of tasks the agent completed well) and, when given,
the texts themselves for the lexical channel (`mesh.router.lexical`).

Similarity method (measured with ``mesh calibrate``; every variant is listed in
``bench/routing_accuracy.py``):

1. *Genre centering.* A capability text describes an agent ("Handles ...") while examples,
   learned texts and queries are requests: two genres whose embeddings sit around two
   different means. Capability vectors are centred by the mean capability vector, request
   vectors (and the query) by the mean request vector, then re-normalised, which removes
   what all descriptions (or all requests) share and keeps what tells agents apart.
2. *Prototype.* Each agent's unit centroid of its centred vectors, the capability vector
   counted `FitConfig.capability_weight` times (it is the one text written to describe the
   whole agent; the examples are single instances). ``cos = centroid . q`` is a cosine.
3. *Discriminative head.* `refit()` fits a small ensemble of one-hidden-layer networks
   over all agents on every agent's own centred texts (`mesh.router.fitting`). The dense
   similarity adds ``logprob_weight * log p(agent | q)``, averaged over the members: a
   non-positive penalty that is ~0 when the query is unambiguously this agent's and grows
   when other agents claim it. It is evaluated for the `CANDIDATE_ROWS` rows with the best
   cosine only (the rest get the lowest candidate's term); on agents the last fit has not
   seen it abstains (`mesh.router.head`).
4. *Lexical channel.* ``coverage`` in [0, 1] is the idf-weighted share of the query's
   character grams found in the agent's own texts (capability text, examples, learned
   texts; `mesh.router.lexical`). It catches the rare words an embedding blurs (a bank
   name, "routing", "pin").

``dense = cos + logprob_weight * log p`` (at most the cosine) and
``similarity = (1 - lexical_weight) * dense + lexical_weight * coverage``: a weighted mean
of a cosine and a share, so it is at most 1 (an agent's own text scores ~1) and an absolute
threshold keeps its meaning. Without texts in the index the lexical channel is off and the
similarity is ``dense``; without a fit ``dense`` is the cosine. The coverage is computed
for the `LEXICAL_ROWS` rows with the best dense part only (the others count 0: a lower
bound, far below the best rows), which keeps its cost independent of the number of agents.
Fitting (`mesh.router.fitting`) is split so the live router can run it off the event loop
(`mesh.router.fits`): `fit_job()` takes a snapshot, its `FitJob.run` returns a `FitResult`,
`apply_fit()` installs it.

From `FitConfig.first_pass_agents` agents on (2,048), the cosines come from a first pass
(`mesh.router.firstpass`): the prototypes projected on 128 principal directions pick the
`FitConfig.first_pass_rows` (512) rows whose exact cosine is computed; the other rows get
the lowest of those and are never candidates.

Runtime stats (load, success rate...) live here too, in arrays aligned with the rows,
so scoring 10,000 agents never walks Python objects. No I/O: pure numpy.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

import numpy as np
from numpy.typing import NDArray

from mesh.router.embedding import Embedder
from mesh.router.firstpass import FirstPass
from mesh.router.fitting import FitConfig, FitJob, FitResult, Yield, unit
from mesh.router.head import HeadTable
from mesh.router.lexical import LexicalIndex
from mesh.router.rows import best_rows, grow_rows, move_row
from mesh.router.rules import RuleIndex, keyword_tokens, tokens
from mesh.router.stats import AgentStats, StatsTable

__all__ = [
    "AgentEntry",
    "AgentStats",
    "CapabilityIndex",
    "FitConfig",
    "FitResult",
    "embed_registration",
    "tokens",
]

logger = logging.getLogger(__name__)

F32 = NDArray[np.float32]

#: past this many agents the head and the lexical coverage are computed only for the rows
#: with the best cosine (`similarity`)
CANDIDATE_ROWS = 64
#: the lexical coverage is computed for this many rows with the best dense part (on the
#: CLINC150 dev set the right agent is among the best 10 for 98 % of the queries, and
#: re-ranking the best 10 scored the same as scoring all 150)
LEXICAL_ROWS = 10


@dataclass
class AgentEntry:
    """Everything the index holds about one agent."""

    agent_id: str
    capability: F32
    examples: F32
    tags: dict[str, str] = field(default_factory=dict)
    keywords: tuple[tuple[str, ...], ...] = ()
    #: reservoir slot -> learned vector (the slots of the agent's memory in Redis)
    learned: dict[int, F32] = field(default_factory=dict)
    #: registration texts fed to the lexical channel (capability text, examples)
    texts: tuple[str, ...] = ()
    #: reservoir slot -> the text of its `learned` vector (None: learned without a text)
    learned_texts: dict[int, str | None] = field(default_factory=dict)
    #: vectors offered to the reservoir so far (reservoir sampling needs it)
    learned_seen: int = 0
    bad: int = 0
    #: the index's change counter at this entry's last change (a fit from before is stale)
    version: int = 0
    #: the counter when this registration was added: a fit that saw an older registration
    #: (or a removed agent of the same id) is not applied to it
    registered: int = 0
    #: the capability mean it was computed with, then the capability's weighted parts of
    #: the centred and the raw prototype (`CapabilityIndex._set_prototypes`)
    weighted_capability: tuple[F32, F32, F32] | None = field(default=None, repr=False)

    def requests(self) -> F32:
        """Example and learned vectors: texts written as requests, like queries."""
        learned = list(self.learned.values())  # copy first: the event loop may learn meanwhile
        if not learned:
            return self.examples
        return np.concatenate([self.examples, np.stack(learned)]).astype(np.float32, copy=False)


def embed_registration(
    embedder: Embedder, capability_text: str, examples: Sequence[str]
) -> tuple[F32, F32]:
    """Embed a registration in one batch: ``(capability vector, example matrix)``."""
    out = embedder.embed([capability_text, *examples])
    return out[0], out[1:]


def _unit1(vec: F32) -> F32:
    """One vector scaled to unit length (`unit` for a single row, without its overhead)."""
    norm = float(np.sqrt(vec.dot(vec)))
    out: F32 = (vec / max(norm, 1e-12)).astype(np.float32, copy=False)
    return out


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
        #: unit centroids in the raw embedding space (no centering): the `similarity` gate
        self._raw = np.zeros((cap, dim), np.float32)
        #: per row: the sums of the agent's request vectors, centred (`_centroids`) and raw
        #: (`_raw`), kept so one learned text updates a row in O(dim)
        self._centred_sum = np.zeros((cap, dim), np.float32)
        self._raw_sum = np.zeros((cap, dim), np.float32)
        #: per row: the agent's own request texts as unit vectors (examples, learned), the
        #: leading rows of `_text_room` (room for learned texts to come, grown by doubling)
        self._raw_texts: list[F32 | None] = [None] * cap
        self._text_room: list[F32 | None] = [None] * cap
        self._head = HeadTable(cap, self.fit_config.members, self.fit_config.hidden)
        self._first = FirstPass(cap)
        self._stats = StatsTable(cap)
        #: per row: the agent's slot in `_lexical`
        self._lex_slots = np.zeros(cap, np.intp)
        self._lexical = LexicalIndex()
        #: texts held by the lexical channel; it is off while this is 0
        self._lex_texts = 0
        self._rules = RuleIndex()
        self._ids: tuple[str, ...] | None = None
        #: genre means from the last fit (zero before it: plain cosines)
        self._capability_mean = np.zeros(dim, np.float32)
        self._request_mean = np.zeros(dim, np.float32)
        self._version = 0
        #: what readers derive from the index, by their key: ``(version, value)``, the
        #: version (e.g. `stats_version`) it was derived at (`mesh.router.scoring`)
        self.derived: dict[Hashable, tuple[Hashable, object]] = {}
        #: True when agents or memories changed since the last `refit()`
        self.dirty = False
        #: rows whose prototype was recomputed so far (a learned text costs one)
        self.rows_refreshed = 0

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
        """``(n, dim)`` unit centroids in the centred space (`center_query` maps a query there)."""
        return self._centroids[: len(self)]

    @property
    def first_pass(self) -> bool:
        """Whether decisions go through the first pass: a basis is installed and the index
        holds at least `FitConfig.first_pass_agents` agents, more than it keeps."""
        cfg, n = self.fit_config, len(self)
        return (
            self._first.basis is not None and 0 < cfg.first_pass_agents <= n > cfg.first_pass_rows
        )

    @property
    def fitted(self) -> bool:
        """Whether the last fit produced a head (see `FitResult.fitted`)."""
        return self._head.active

    def center_query(self, query: F32) -> F32:
        """The unit query vector moved into the centred request space."""
        q = np.asarray(query, np.float32) - self._request_mean
        norm = float(np.sqrt(q.dot(q)))  # what np.linalg.norm computes, without its checks
        out: F32 = (q / max(norm, 1e-12)).astype(np.float32, copy=False)
        return out

    def rank(self, query: F32, text: str = "") -> F32:
        """The ranking score of every row (see `scores`)."""
        return self.scores(query, text)[0]

    def scores(
        self, query: F32, text: str = "", eligible: NDArray[np.bool_] | None = None
    ) -> tuple[F32, F32]:
        """Per row: the ranking score and the absolute `similarity` thresholds apply to.

        The two names mean the same here as in `mesh.router.scoring`: *rank* orders agents,
        *similarity* is what the threshold gates.

        Rank: `_rank` (centred, discriminative, lexical). It tells agents apart,
        but its scale depends on who else is registered: with three agents the genre means
        and the head remove most of what a query shares with the right agent.

        Similarity: the mean of two raw (uncentred) cosines, to the agent's centroid and to its
        closest own text (a query that paraphrases one registered example should pass even
        when the agent's other texts pull its centroid away). It depends on the agent's own
        texts only, so a threshold calibrated on one mesh holds on another of any size.
        Computed for the `CANDIDATE_ROWS` best-ranked rows (the others get -1: they cannot
        be chosen); the closest-text cosine for the `LEXICAL_ROWS` best (the others use
        their centroid cosine for both halves).

        `eligible` marks the rows the decision may choose (tags, availability): when it
        leaves rows out, the best eligible rows are computed too, whatever outranks them
        (`best_rows`), so a decision among few agents of many finds its best one.
        """
        if eligible is not None and eligible.all():
            eligible = None
        rank, rows, best = self._rank(query, text, eligible)
        n = len(self)
        similarity = np.full(n, -1.0, np.float32)
        if n == 0:
            return rank, similarity
        if rows is None:
            rows = best_rows(rank, CANDIDATE_ROWS)
        q = np.asarray(query, np.float32)
        raw = self._raw[rows] @ q
        if best is None:
            best = best_rows(rank[rows], LEXICAL_ROWS)
        closest = raw.copy()
        own = [self._raw_texts[r] for r in rows[best].tolist()]
        held = [
            i
            for i, texts in zip(best.tolist(), own, strict=True)
            if texts is not None and len(texts)
        ]
        if held:
            # one product per agent, then one max per agent over the joined products
            products = [texts @ q for texts in own if texts is not None and len(texts)]
            starts = list(accumulate((len(p) for p in products[:-1]), initial=0))
            closest[held] = np.maximum.reduceat(np.concatenate(products), starts)
        similarity[rows] = (raw + closest) * np.float32(0.5)
        return rank, similarity

    def _rank(
        self, query: F32, text: str, eligible: NDArray[np.bool_] | None = None
    ) -> tuple[F32, NDArray[np.intp] | None, NDArray[np.intp] | None]:
        """Per row: ``(1 - lw) * dense + lw * coverage`` (module docstring).

        Also returns the candidate rows and the positions, among them, of the best ones
        (those that got a coverage), which `scores` reuses.

        `text` is the query's text for the lexical channel (no text: coverage 0). One
        matrix-vector product gives every row's cosine (past `FitConfig.first_pass_agents`,
        the rows the first pass keeps: module docstring); past `CANDIDATE_ROWS` agents the
        head's log-probabilities (normalised over the candidates: the rest hold a negligible
        share of the probability mass) and the coverage are computed for the rows with the
        best cosine only, which keeps a decision over 10,000 agents to one pass over the
        (projected) matrix.
        """
        q = self.center_query(query)
        n = len(self)
        kept = (
            self._first.rows(q, n, self.fit_config.first_pass_rows, eligible)
            if self.first_pass
            else None
        )
        sim: F32
        if kept is None:
            sim = self._centroids[:n] @ q
        else:  # the first pass kept these rows: the others get the lowest kept cosine
            exact = self._centroids[kept] @ q
            sim = np.full(n, exact.min(), np.float32)
            sim[kept] = exact
        if n == 0:
            return sim, None, None
        weight = np.float32(self.fit_config.logprob_weight)
        head = self._head.active and weight > 0 and n >= 2
        lw = np.float32(self.fit_config.lexical_weight)
        lexical = lw > 0 and self._lex_texts > 0
        if not (head or lexical) and kept is None and eligible is None:
            return sim, None, None  # rows are the centroids: plain cosines
        rows = best_rows(sim, CANDIDATE_ROWS, pool=kept, eligible=eligible)
        if not (head or lexical):
            return sim, rows, None
        if head:
            logp = self._head.logp(q, rows)
            if len(rows) < n:
                low = logp.min()
                sim += weight * low
                sim[rows] += weight * (logp - low)
            else:
                sim += weight * logp
        if not lexical:
            return sim, rows, None
        sim *= np.float32(1.0) - lw
        best = best_rows(
            sim[rows], LEXICAL_ROWS, eligible=None if eligible is None else eligible[rows]
        )
        if text:
            top = rows[best]
            sim[top] += lw * self._lexical.coverage(text, self._lex_slots[top])
        return sim, rows, best

    @property
    def stats_version(self) -> tuple[int, int]:
        """Changes with any row's stats and with the number of rows: what is derived from
        the stats alone holds while it stays the same (`derived`)."""
        return self._stats.version, len(self)

    @property
    def load(self) -> F32:
        return self._stats.load[: len(self)]

    @property
    def max_concurrency(self) -> F32:
        return self._stats.max_conc[: len(self)]

    @property
    def success_rate(self) -> F32:
        return self._stats.success[: len(self)]

    @property
    def idle_s(self) -> F32:
        return self._stats.idle[: len(self)]

    @property
    def routable(self) -> NDArray[np.bool_]:
        return self._stats.routable[: len(self)]

    @property
    def priority(self) -> F32:
        return self._stats.priority[: len(self)]

    @property
    def completed(self) -> NDArray[np.int64]:
        return self._stats.completed[: len(self)]

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
        texts: Sequence[str] = (),
    ) -> None:
        """Add or replace an agent. A replaced agent keeps its learned memory and stats.

        `texts` are the registration's texts for the lexical channel, normally
        ``[capability_text, *examples]`` (the texts `capability` and `examples` embed).
        """
        examples = np.asarray(examples, np.float32).reshape(-1, self.dim)
        capability = np.asarray(capability, np.float32).reshape(self.dim)
        kws = keyword_tokens(keywords)
        entry = AgentEntry(agent_id, capability, examples, dict(tags or {}), kws)
        entry.texts = tuple(texts)
        old_row = self._rows.get(agent_id)
        if old_row is not None:
            old = self._entries[old_row]
            entry.learned, entry.learned_seen, entry.bad = old.learned, old.learned_seen, old.bad
            entry.learned_texts = old.learned_texts
            self._unindex(old)
            row = old_row
            slot = int(self._lex_slots[row])
            for text in old.texts:
                self._lex_remove(slot, text)
            self._entries[row] = entry
        else:
            row = len(self._entries)
            self._grow(row + 1)
            self._entries.append(entry)
            self._rows[agent_id] = row
            slot = self._lexical.add_agent()
            self._lex_slots[row] = slot
            self.set_stats(agent_id, stats or AgentStats())
        for text in entry.texts:
            self._lex_add(slot, text)
        if stats is not None:
            self.set_stats(agent_id, stats)
        self._rules.add(agent_id, entry.tags, entry.keywords)
        self._head.clear_row(row)  # new texts: a fitted row (or a removed agent's) is stale
        self._changed(row)
        entry.registered = entry.version
        self._ids = None

    def remove(self, agent_id: str) -> bool:
        """Drop an agent (its row is filled by the last one). False when unknown."""
        row = self._rows.pop(agent_id, None)
        if row is None:
            return False
        gone = self._entries[row]
        self._unindex(gone)
        self._lexical.remove_agent(int(self._lex_slots[row]))
        self._lex_texts -= len(gone.texts) + sum(t is not None for t in gone.learned_texts.values())
        last = len(self._entries) - 1
        if row != last:
            moved = self._entries[last]
            self._entries[row] = moved
            self._rows[moved.agent_id] = row
            move_row(self, self._ARRAYS, last, row)
            self._stats.move(last, row)
            self._head.move(last, row)
            self._first.move(last, row)
            self._raw_texts[row] = self._raw_texts[last]
            self._text_room[row] = self._text_room[last]
        self._raw_texts[last] = None
        self._text_room[last] = None
        self._entries.pop()
        self._ids = None
        self._version += 1
        self.dirty = True
        return True

    def count_dispatch(self, agent_id: str) -> None:
        """One more task in flight for `agent_id`, idle no more (unknown agents: nothing)."""
        row = self._rows.get(agent_id)
        if row is not None:
            self._stats.dispatched(row)

    def set_stats(self, agent_id: str, stats: AgentStats) -> None:
        self._stats.set(self._rows[agent_id], stats)

    def stats(self, agent_id: str) -> AgentStats:
        return self._stats.get(self._rows[agent_id])

    # --- rule filter and keywords ----------------------------------------------------------
    def tag_mask(self, required: Mapping[str, str]) -> NDArray[np.bool_]:
        """Rows whose tags contain every ``k=v`` of `required`."""
        ids = self._rules.with_tags(required)
        mask = np.full(len(self), ids is None, np.bool_)
        if ids:
            mask[[self._rows[a] for a in ids]] = True
        return mask

    def keyword_hits(self, query_text: str) -> NDArray[np.float32]:
        """Per row: 1.0 when one of the agent's keywords (all its words) is in the query."""
        hits = np.zeros(len(self), np.float32)
        for agent_id in self._rules.keyword_hits(query_text):
            hits[self._rows[agent_id]] = 1.0
        return hits

    # --- learning ------------------------------------------------------------------------
    def learn(self, agent_id: str, vec: F32, *, good: bool, text: str | None = None) -> None:
        """Record an outcome: good offers `vec` to the agent's bounded reservoir, bad counts.

        `text` is the text `vec` embeds; with it the lexical channel learns it too (it holds
        exactly the reservoir's texts: a text replaced in the reservoir leaves it).

        The reservoir is a uniform sample (Algorithm R) of every good vector seen, drawn
        with the index's seeded RNG, so replaying the same outcomes gives the same memory.
        The live router does not sample here: Redis picks the slot, `learn_at` applies it.
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
        seen = entry.learned_seen + 1
        if len(entry.learned) < self.memory_size:
            slot = next(s for s in range(self.memory_size) if s not in entry.learned)
        else:
            slot = int(self._rng.integers(seen))
            if slot >= self.memory_size:
                entry.learned_seen = seen
                return
        self.learn_at(agent_id, slot, vec, text, seen=seen)

    def learn_at(
        self, agent_id: str, slot: int, vec: F32, text: str | None, *, seen: int | None = None
    ) -> bool:
        """Put `vec` (and its `text`) into reservoir `slot`, replacing what was there.

        Costs the grams of the old and the new text and one row: nothing else is touched.
        `seen` is the reservoir's count of offers (None: unchanged). False for an unknown
        agent or a slot outside the reservoir.
        """
        row = self._rows.get(agent_id)
        if row is None or not 0 <= slot < self.memory_size:
            logger.debug("learn_at agent=%s slot=%d ignored", agent_id, slot)
            return False
        entry = self._entries[row]
        lex_slot = int(self._lex_slots[row])
        old = entry.learned_texts.get(slot)
        if old is not None:
            self._lex_remove(lex_slot, old)
        if text is not None:
            self._lex_add(lex_slot, text)
        learned = dict(entry.learned)  # a new dict: a running fit keeps the old one
        new = np.asarray(vec, np.float32).reshape(self.dim)
        replaced = learned.get(slot)
        learned[slot] = new
        entry.learned = learned
        entry.learned_texts = {**entry.learned_texts, slot: text}
        if seen is not None:
            entry.learned_seen = max(int(seen), len(learned))
        self._version += 1
        entry.version = self._version
        self._update_row(row, slot, replaced, new)
        self.dirty = True
        return True

    def set_memory(
        self,
        agent_id: str,
        vectors: F32,
        *,
        seen: int,
        bad: int,
        texts: Sequence[str] | None = None,
        slots: Sequence[int] | None = None,
    ) -> None:
        """Replace an agent's learned reservoir wholesale (e.g. loaded from Redis).

        `slots` are the reservoir slots of `vectors` (default 0, 1, ...); vectors beyond
        `memory_size` are dropped (the last ones are kept); `seen` is how many good vectors
        were ever offered (it drives later reservoir sampling). `texts`, when given, are
        the texts of `vectors` (same order) for the lexical channel. Unknown agents are
        ignored.

        Raises:
            ValueError: `texts` or `slots` and `vectors` differ in length.
        """
        row = self._rows.get(agent_id)
        if row is None:
            logger.debug("set_memory for unknown agent=%s ignored", agent_id)
            return
        all_rows = np.asarray(vectors, np.float32).reshape(-1, self.dim)
        for name, given in (("texts", texts), ("slots", slots)):
            if given is not None and len(given) != len(all_rows):
                raise ValueError(f"set_memory: {len(given)} {name} for {len(all_rows)} vectors")
        keep = slice(max(len(all_rows) - self.memory_size, 0), None)
        rows = all_rows[keep]
        kept: list[str | None] = list(texts[keep]) if texts is not None else [None] * len(rows)
        slot_ids = list(slots[keep]) if slots is not None else list(range(len(rows)))
        entry = self._entries[row]
        lex_slot = int(self._lex_slots[row])
        for old in entry.learned_texts.values():
            if old is not None:
                self._lex_remove(lex_slot, old)
        for new in kept:
            if new is not None:
                self._lex_add(lex_slot, new)
        entry.learned_texts = dict(zip(slot_ids, kept, strict=True))
        entry.learned = {s: r.copy() for s, r in zip(slot_ids, rows, strict=True)}
        entry.learned_seen = max(int(seen), len(entry.learned))
        entry.bad = int(bad)
        self._changed(row)

    # --- prototypes ----------------------------------------------------------------------
    def refit(self) -> bool:
        """`fit_directions` then `apply_fit`, in the caller's thread; False when skipped."""
        return self.apply_fit(self.fit_directions())

    def fit_directions(self, *, yields: Yield | None = None) -> FitResult:
        """A full fit of a snapshot, in the caller's thread (`fit_job`, `FitJob.run`)."""
        return self.fit_job().run(yields)

    def fit_job(self, previous: FitResult | None = None) -> FitJob:
        """A snapshot of every agent's texts to fit: genre means and the head (`previous`
        set: the output layer alone, on its hidden layers, with version -1, so the index
        stays due a full fit).

        Taken on the event loop and cheap (lists of the entries' arrays, which are
        replaced, never written in place), so the fit may run anywhere while the loop goes
        on adding, removing and learning. A full fit takes 2-3 s on two cores for 150 agents
        (`fit_snapshot`); the head is skipped past `FitConfig.max_cells` (texts x agents).
        """
        entries = list(self._entries)
        return FitJob(
            self._version if previous is None else -1,
            {e.agent_id: e.registered for e in entries},
            [e.capability for e in entries],
            [e.requests() for e in entries],
            self.dim,
            self.fit_config,
            previous,
        )

    def apply_fit(self, result: FitResult) -> bool:
        """Install a `FitResult` (on the event loop); returns `result.fitted`.

        Rows whose agent learned since the snapshot take the fitted head anyway (it is one
        fit old); agents registered or re-registered since have no head row until the next
        fit (the head abstains on them). `dirty` stays True while anything changed.
        """
        self._capability_mean = result.capability_mean
        self._request_mean = result.request_mean
        head = result.head
        self._head.install(head)
        # a fit from another router has no basis: the one in use stays
        basis = self._first.basis if result.basis is None else result.basis
        self._first.basis = None  # every row is projected once, below
        fitted_rows = {a: i for i, a in enumerate(result.agents)}
        for row, entry in enumerate(self._entries):
            i = fitted_rows.get(entry.agent_id)
            if (
                head is not None
                and i is not None
                and result.agents[entry.agent_id] == (entry.registered)
            ):
                self._head.set_row(row, head, i)
            else:
                self._head.clear_row(row)
            self._refresh_row(row)
        if basis is not None:
            self._first.install(basis, self.prototypes)
        self.dirty = self._version != result.version
        return result.fitted

    def _changed(self, row: int) -> None:
        # one index-wide counter: a removed and re-added agent never reuses a version
        self._version += 1
        self._entries[row].version = self._version
        self._refresh_row(row)
        self.dirty = True

    def _refresh_row(self, row: int) -> None:
        """Recompute row `row` from all of its agent's texts."""
        self.rows_refreshed += 1
        entry = self._entries[row]
        requests = entry.requests()
        self._centred_sum[row] = unit(requests - self._request_mean).sum(axis=0)
        unit_requests = unit(requests)
        self._raw_texts[row] = self._text_room[row] = unit_requests
        self._raw_sum[row] = unit_requests.sum(axis=0)
        self._set_prototypes(row, entry)

    def _update_row(self, row: int, slot: int, old: F32 | None, new: F32) -> None:
        """Row `row` after learned `slot` went from `old` (None: empty) to `new`: O(dim).

        The sums take the difference; the matrix of the agent's own texts (closest-text
        cosine) gets the one row in place, or appended in its room (scoring reads it on the
        event loop, between two changes, never across one).
        """
        self.rows_refreshed += 1
        entry = self._entries[row]
        mean = self._request_mean
        new_unit = _unit1(new)
        self._centred_sum[row] += _unit1(new - mean)
        self._raw_sum[row] += new_unit
        if old is not None:
            self._centred_sum[row] -= _unit1(old - mean)
            self._raw_sum[row] -= _unit1(old)
        texts = self._raw_texts[row]
        position = len(entry.examples) + list(entry.learned).index(slot)
        if texts is not None and old is not None and position < len(texts):
            texts[position] = new_unit
        elif texts is not None and old is None and position == len(texts):
            room = self._text_room[row]
            if room is None or len(room) <= position:
                most = len(entry.examples) + self.memory_size
                room = np.empty((min(max(2 * position, position + 1), most), self.dim), np.float32)
                room[:position] = texts
                self._text_room[row] = room
            room[position] = new_unit
            texts = room[: position + 1]
        else:
            texts = self._text_room[row] = unit(entry.requests())
        self._raw_texts[row] = texts
        self._set_prototypes(row, entry)

    def _set_prototypes(self, row: int, entry: AgentEntry) -> None:
        mean = self._capability_mean
        kept = entry.weighted_capability
        if kept is None or kept[0] is not mean:
            # the capability's weighted parts change with the fit's means only (not per text)
            weight = np.float32(self.fit_config.capability_weight)
            cap = _unit1(entry.capability - mean)
            kept = entry.weighted_capability = (
                mean,
                weight * cap,
                weight * _unit1(entry.capability),
            )
        self._centroids[row] = _unit1(self._centred_sum[row] + kept[1])
        self._first.set_row(row, self._centroids[row])
        self._raw[row] = _unit1(self._raw_sum[row] + kept[2])

    # --- storage -------------------------------------------------------------------------
    #: per-row arrays of the index itself (the stats and head tables have their own),
    #: grown and moved together
    _ARRAYS = ("_centroids", "_raw", "_centred_sum", "_raw_sum", "_lex_slots")

    def _grow(self, need: int) -> None:
        cap = self._centroids.shape[0]
        if need <= cap:
            return
        new_cap = max(need, cap * 2)
        self._raw_texts.extend([None] * (new_cap - cap))
        self._text_room.extend([None] * (new_cap - cap))
        grow_rows(self, self._ARRAYS, new_cap)
        self._stats.grow(new_cap)
        self._head.grow(new_cap)
        self._first.grow(new_cap)

    def _lex_add(self, slot: int, text: str) -> None:
        self._lexical.add_text(slot, text)
        self._lex_texts += 1

    def _lex_remove(self, slot: int, text: str) -> None:
        self._lexical.remove_text(slot, text)
        self._lex_texts -= 1

    def _unindex(self, entry: AgentEntry) -> None:
        self._rules.remove(entry.agent_id, entry.tags)
