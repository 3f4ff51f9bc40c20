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

Incremental: texts are added and removed one at a time (gram reference counts per agent and
document frequencies per gram), and scoring looks up only the query's grams in the bags of the
candidate agents it is given, so its cost never grows with the number of agents. Pure: no I/O.
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
    for word in _WORD.findall(unicodedata.normalize("NFKC", text).lower()):
        for part in _split_cjk(word):
            if _CJK.fullmatch(part):
                out.update(cjk_words(part))
                continue
            padded = f"<{part}>"
            out.update(padded[i : i + GRAM] for i in range(max(len(padded) - GRAM + 1, 1)))
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
    """Gram bags per agent slot and the document frequencies that weigh a query's grams.

    Slots are small stable integers handed out by `add_agent` (a freed slot is reused);
    the caller maps its own rows to slots.
    """

    def __init__(self) -> None:
        #: per slot: gram -> how many of the agent's texts contain it (None: free slot)
        self._bags: list[Counter[str] | None] = []
        self._free: list[int] = []
        #: gram -> how many agents hold it (document frequency)
        self._df: Counter[str] = Counter()
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
            self._unpost(gram)
        self._bags[slot] = None
        self._free.append(slot)
        self._agents -= 1

    def add_text(self, slot: int, text: str) -> None:
        bag = self._bag(slot)
        found = grams(text)
        self.postings_changed += len(found)
        for gram in found:
            if bag[gram] == 0:
                self._df[gram] += 1
            bag[gram] += 1

    def remove_text(self, slot: int, text: str) -> None:
        """Undo one `add_text(slot, text)`; grams the bag does not hold are ignored."""
        bag = self._bag(slot)
        found = grams(text)
        self.postings_changed += len(found)
        for gram in found:
            count = bag.get(gram, 0)
            if count <= 1:
                if count:
                    del bag[gram]
                    self._unpost(gram)
            else:
                bag[gram] = count - 1

    def coverage(self, text: str, slots: NDArray[np.intp]) -> F32:
        """Per slot of `slots`: the idf-weighted share of the grams of `text` it holds.

        Cost grows with the grams of `text` times ``len(slots)`` (set lookups), never with
        the number of agents, so the caller passes only the candidates worth scoring.
        """
        query = list(grams(text))
        if not query or not len(slots) or not self._agents:
            return np.zeros(len(slots), np.float32)
        n = self._agents
        df = np.array([self._df.get(g, 0) for g in query], np.float64)
        idf = np.log1p((n - df + 0.5) / (df + 0.5))
        bags = [self._bag(int(s)) for s in slots]
        held = np.array([[g in bag for g in query] for bag in bags], np.float64)
        out: F32 = (held @ (idf / idf.sum())).astype(np.float32)
        return out

    def _bag(self, slot: int) -> Counter[str]:
        bag = self._bags[slot] if 0 <= slot < len(self._bags) else None
        if bag is None:
            raise KeyError(f"lexical slot {slot} is not in use")
        return bag

    def _unpost(self, gram: str) -> None:
        if self._df[gram] <= 1:
            del self._df[gram]
        else:
            self._df[gram] -= 1
