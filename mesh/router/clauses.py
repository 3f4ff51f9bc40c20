"""Split a request into clauses where a second intent may start. Pure: no I/O, no model.

A boundary is sentence punctuation (``. ? ! ;`` followed by a blank or the end, and
``。？！；`` or a line break anywhere) or a connective: ``also``, ``and also``, ``plus``
(as whole words, any case) and ``还有``, ``另外``, ``顺便`` (anywhere: Chinese has no
blanks). A connective is dropped with the blanks and commas around it; what is left of each
side is a clause, and clauses that are empty (or only punctuation) are dropped.

Commas alone are no boundary: "in french, how do i say, see you later" is one request, and
the router's scoring, not the splitter, decides whether two clauses are two intents
(`mesh.router.intents`). Every clause keeps its span in the original text, so the
router can hand an agent the original words (a clause that is no intent of its own is
merged with its neighbour by span).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CHINESE_CONNECTIVES", "ENGLISH_CONNECTIVES", "Clause", "split_clauses"]

#: connectives between English words (longest first: "and also" before "also")
ENGLISH_CONNECTIVES: tuple[str, ...] = ("and also", "also", "plus")
#: connectives of Chinese text (no word boundaries there)
CHINESE_CONNECTIVES: tuple[str, ...] = ("还有", "另外", "顺便")

_PUNCTUATION = r"[.?!;](?=\s|$)|[。？！；\n]"
_ENGLISH = r"\b(?:" + "|".join(c.replace(" ", r"\s+") for c in ENGLISH_CONNECTIVES) + r")\b"
_CHINESE = "|".join(CHINESE_CONNECTIVES)
#: one boundary, with the blanks and commas around a connective
_BOUNDARY = re.compile(
    rf"(?:{_PUNCTUATION})+|[\s,，、]*(?:{_ENGLISH}|{_CHINESE})[\s,，、:：]*", re.IGNORECASE
)
#: what a clause may not consist of alone
_EMPTY = re.compile(r"[\s\W_]*", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Clause:
    """One clause: its text (stripped) and its span ``[start, end)`` in the request."""

    text: str
    start: int
    end: int


def split_clauses(text: str, *, limit: int = 8) -> list[Clause]:
    """The clauses of `text`, in order (one clause, the whole text, when none splits it).

    At most `limit` clauses: past that, the rest of the text stays in the last one (a
    request of a dozen sentences is a document, not a list of intents).
    """
    clauses: list[Clause] = []
    position = 0
    for match in _BOUNDARY.finditer(text):
        _add(clauses, text, position, match.start())
        position = match.end()
    _add(clauses, text, position, len(text))
    if len(clauses) > limit:
        last = clauses[limit - 1]
        tail = Clause(text[last.start : clauses[-1].end], last.start, clauses[-1].end)
        clauses = [*clauses[: limit - 1], tail]
    if not clauses:
        return [Clause(text.strip(), 0, len(text))]
    return clauses


def _add(clauses: list[Clause], text: str, start: int, end: int) -> None:
    piece = text[start:end]
    if _EMPTY.fullmatch(piece):
        return
    lead = len(piece) - len(piece.lstrip())
    trail = len(piece.rstrip())
    clauses.append(Clause(piece.strip(), start + lead, start + trail))
