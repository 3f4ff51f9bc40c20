"""Rule filters and keyword boosts: which agents carry a tag, which keywords a query hits.

Kept by agent id (`CapabilityIndex` maps ids to rows), so an agent's rules are added and
removed in O(its tags + keywords), never by walking every agent.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
#: a run of CJK characters (the scripts of `mesh.router.lexical`), captured for `re.split`
_CJK_RUN = re.compile(r"([\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff]+)")
#: CJK text has no spaces: a run stands for its substrings of up to this many characters,
#: so a CJK keyword matches wherever it occurs in a query ("销售" in "最近的销售数据")
CJK_SPAN = 4

Keyword = tuple[str, ...]
K = TypeVar("K", bound=Hashable)


def tokens(text: str) -> list[str]:
    """Lower-case word tokens, the unit of keyword matching (CJK runs: see `CJK_SPAN`)."""
    if _CJK_RUN.search(text) is None:
        return _WORD.findall(text.lower())
    out: list[str] = []
    for word in _WORD.findall(text.lower()):
        for i, part in enumerate(_CJK_RUN.split(word)):
            if i % 2 == 0:
                if part:
                    out.append(part)
                continue
            n = len(part)
            out.extend(part[a:b] for a in range(n) for b in range(a + 1, min(a + CJK_SPAN, n) + 1))
    return out


def keyword_tokens(keywords: Iterable[str]) -> tuple[Keyword, ...]:
    """Each keyword as its words (a keyword of several words matches when all are present)."""
    return tuple(t for t in (tuple(tokens(k)) for k in keywords) if t)


def _discard(by: dict[K, set[str]], key: K, agent_id: str) -> None:
    held = by.get(key)
    if held is not None:
        held.discard(agent_id)
        if not held:
            del by[key]


class RuleIndex:
    """Tags and keywords of every agent."""

    def __init__(self) -> None:
        self._by_tag: dict[tuple[str, str], set[str]] = {}
        self._by_keyword: dict[str, set[str]] = {}
        self._keywords: dict[str, tuple[Keyword, ...]] = {}

    def add(self, agent_id: str, tags: Mapping[str, str], keywords: tuple[Keyword, ...]) -> None:
        for k, v in tags.items():
            self._by_tag.setdefault((k, v), set()).add(agent_id)
        for kw in keywords:
            self._by_keyword.setdefault(kw[0], set()).add(agent_id)
        self._keywords[agent_id] = keywords

    def remove(self, agent_id: str, tags: Mapping[str, str]) -> None:
        """Forget `agent_id`'s tags and keywords; a tag or word nobody holds any more goes
        (a profile replaced with new tags or keywords leaves nothing behind)."""
        for k, v in tags.items():
            _discard(self._by_tag, (k, v), agent_id)
        for kw in self._keywords.pop(agent_id, ()):
            _discard(self._by_keyword, kw[0], agent_id)

    def with_tags(self, required: Mapping[str, str]) -> set[str] | None:
        """Agents whose tags contain every ``k=v`` of `required` (None: no rule at all)."""
        ids: set[str] | None = None
        for k, v in required.items():
            have = self._by_tag.get((k, str(v)), set())
            ids = set(have) if ids is None else ids & have
        return ids

    def keyword_hits(self, query_text: str) -> set[str]:
        """Agents one of whose keywords (all of its words) is in the query."""
        if not self._by_keyword:
            return set()  # no agent registered keywords: nothing to cut the query into
        words = tokens(query_text)
        if not words:
            return set()
        present = set(words)
        hit: set[str] = set()
        for word in present:
            for agent_id in self._by_keyword.get(word, ()):
                if agent_id not in hit and any(
                    kw[0] == word and present.issuperset(kw) for kw in self._keywords[agent_id]
                ):
                    hit.add(agent_id)
        return hit
