"""The lexical channel of the router: how much of a query's rare wording an agent's texts share.

Each agent's texts (capability text, examples, learned texts) are pooled into one bag of
*grams*: character 4-grams of every lower-cased word (``<word>`` padded, so short words and
word edges count) for alphabetic scripts. Char grams match inflections ("blocked" / "block")
and typos without a stemmer per language. CJK runs have no spaces: they are cut into words by
jieba's dictionary (`cjk_words`; its HMM for unknown words is off, so a cut depends on the
dictionary alone), or into character bigrams when jieba is not installed. Measured on SMP2017
(``bench/routing_accuracy.py --lang zh``, cold top-1 of the router): bigrams 0.756, bigrams and
single characters 0.759, jieba words and bigrams 0.758, jieba words 0.762 (with its HMM 0.763);
the lexical channel off 0.757. English is untouched (no CJK runs): CLINC150 val 0.827 / 0.917.

``coverage(agent, q) = sum(idf(g) for g in grams(q) if g in bag(agent)) / sum(idf(g) for g in
grams(q))`` with the BM25 idf over agents, ``idf(g) = ln(1 + (N - df + 0.5) / (df + 0.5))``.
It lies in [0, 1]: 1 when every gram of the query occurs in the agent's texts, and grams
every agent uses ("Handles requests about...", "please", "my") weigh almost nothing.
Measured on CLINC150 (``bench/routing_accuracy.py``) against BM25, word tokens, stemming and
the maximum over single texts, all within half a point of each other; this is the simplest.

Incremental: texts are added and removed one at a time (gram reference counts per agent, and
per gram the set of agents holding it as the bits of an int, whose count is its document
frequency), and scoring reads only the query's grams' bits, at the candidate agents it is
given: one dictionary read per gram and a few bytes per agent slot. Pure: no I/O.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
import warnings
from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np
from numpy.typing import NDArray

__all__ = ["LexicalIndex", "cjk_words", "grams"]

logger = logging.getLogger(__name__)

F32 = NDArray[np.float32]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: Han, kana, Hangul syllables and CJK compatibility ideographs: scripts written without spaces
_CJK = re.compile(r"[\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
#: width of the character grams of alphabetic words (4 beat 3 and 5 on the CLINC150 dev set)
GRAM = 4


@functools.lru_cache(maxsize=65_536)
def grams(text: str) -> frozenset[str]:
    """The distinct grams of `text` (see the module docstring); cached: a routed text is
    cut once for its query and again when it is learned."""
    out: set[str] = set()
    folded = unicodedata.normalize("NFKC", text).lower()
    # without a CJK run (most texts) every word is one alphabetic part
    split = _split_cjk if _CJK.search(folded) else None
    for word in _WORD.findall(folded):
        for part in (word,) if split is None else split(word):
            if split is not None and _CJK.fullmatch(part):
                out.update(cjk_words(part))
                continue
            padded = f"<{part}>"
            out.update([padded[i : i + GRAM] for i in range(max(len(padded) - GRAM + 1, 1))])
    return frozenset(out)


def cjk_words(run: str) -> list[str]:
    """A run of CJK characters cut into words (jieba), or into its character bigrams when
    jieba is not installed (a single character is its own gram either way)."""
    cut = _segmenter()
    if cut is None:
        return [run[i : i + 2] for i in range(len(run) - 1)] if len(run) > 1 else [run]
    return [w for w in cut(run) if w.strip()]


@functools.cache
def _segmenter() -> Callable[[str], list[str]] | None:
    """jieba's dictionary cut, loaded on first use (~0.5 s, then cached in the temp dir by
    jieba); None without jieba (the ``router`` extra installs it)."""
    try:
        with warnings.catch_warnings():
            # jieba 0.42 imports pkg_resources, which newer setuptools deprecate
            warnings.simplefilter("ignore")
            import jieba  # type: ignore[import-untyped]
    except ImportError:
        logger.info("jieba is not installed: CJK text is cut into character bigrams")
        return None
    # jieba gives its logger a stderr handler at DEBUG; keep its start-up chatter out
    logging.getLogger("jieba").setLevel(logging.WARNING)
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()

    def cut(run: str) -> list[str]:
        return list(tokenizer.cut(run, HMM=False))

    return cut


def _split_cjk(word: str) -> list[str]:
    """`word` cut into CJK runs and the other runs between them."""
    parts: list[str] = []
    last = 0
    for m in _CJK.finditer(word):
        if m.start() > last:
            parts.append(word[last : m.start()])
        parts.append(m.group())
        last = m.end()
    if last < len(word):
        parts.append(word[last:])
    return parts


class LexicalIndex:
    """Gram bags per agent slot and, per gram, the slots holding it (its document frequency).

    Slots are small stable integers handed out by `add_agent` (a freed slot is reused);
    the caller maps its own rows to slots.
    """

    def __init__(self) -> None:
        #: per slot: gram -> how many of the agent's texts contain it (None: free slot)
        self._bags: list[Counter[str] | None] = []
        self._free: list[int] = []
        #: gram -> the slots whose bag holds it, as the bits of an int: its document
        #: frequency is the number of bits; a query reads its grams' masks, not every bag
        self._holders: dict[str, int] = {}
        self._agents = 0
        #: gram postings added or removed so far (a learned text costs its own grams)
        self.postings_changed = 0

    def __len__(self) -> int:
        return self._agents

    def add_agent(self, texts: Iterable[str] = ()) -> int:
        """A new agent slot holding `texts`; returns the slot."""
        if self._free:
            slot = self._free.pop()
            self._bags[slot] = Counter()
        else:
            slot = len(self._bags)
            self._bags.append(Counter())
        self._agents += 1
        for text in texts:
            self.add_text(slot, text)
        return slot

    def remove_agent(self, slot: int) -> None:
        """Free `slot` and forget its texts."""
        bag = self._bag(slot)
        for gram in bag:
            self._unpost(gram, slot)
        self._bags[slot] = None
        self._free.append(slot)
        self._agents -= 1

    def add_text(self, slot: int, text: str) -> None:
        bag = self._bag(slot)
        found = grams(text)
        self.postings_changed += len(found)
        holders, bit = self._holders, 1 << slot
        for gram in [g for g in found if g not in bag]:  # new to the bag: the slot holds it
            holders[gram] = holders.get(gram, 0) | bit
        bag.update(found)  # counted in C

    def remove_text(self, slot: int, text: str) -> None:
        """Undo one `add_text(slot, text)`; grams the bag does not hold are ignored."""
        bag = self._bag(slot)
        found = grams(text)
        self.postings_changed += len(found)
        for gram in found:
            count = bag.get(gram, 0)
            if count <= 1:
                if count:
                    bag.pop(gram)
                    self._unpost(gram, slot)
            else:
                bag[gram] = count - 1

    def coverage(self, text: str, slots: NDArray[np.intp]) -> F32:
        """Per slot of `slots`: the idf-weighted share of the grams of `text` it holds.

        One dictionary read per gram of `text` (its holders' bits, a bit per agent slot), then
        the bits of `slots` in one numpy pass: no bag is looked into, so the cost stays a few
        cache lines per gram whatever the bags' sizes and the number of slots asked for.
        """
        query = list(grams(text))
        if not query or not len(slots) or not self._agents:
            return np.zeros(len(slots), np.float32)
        wanted = slots.astype(np.intp, copy=False)
        for slot in wanted.tolist():
            self._bag(slot)  # a slot not in use is the caller's bug
        n = self._agents
        masks = [self._holders.get(g, 0) for g in query]
        df = np.fromiter(map(int.bit_count, masks), np.float64, len(query))
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        width = (len(self._bags) + 7) // 8
        bits = np.frombuffer(
            b"".join(m.to_bytes(width, "little") for m in masks), np.uint8
        ).reshape(len(query), width)
        # (slots, grams): slot s is bit s % 8 of byte s // 8 of each gram's mask
        held = np.ascontiguousarray(
            (bits[:, wanted >> 3].T >> (wanted & 7)[:, None]) & 1, dtype=np.float64
        )
        out: F32 = (held @ (idf / idf.sum())).astype(np.float32)
        return out

    def _bag(self, slot: int) -> Counter[str]:
        bag = self._bags[slot] if 0 <= slot < len(self._bags) else None
        if bag is None:
            raise KeyError(f"lexical slot {slot} is not in use")
        return bag

    def _unpost(self, gram: str, slot: int) -> None:
        left = self._holders[gram] & ~(1 << slot)
        if left:
            self._holders[gram] = left
        else:
            del self._holders[gram]
