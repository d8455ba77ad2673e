"""Phrases that forgive layout (docs/contract.md §9, docs/decisions.md "Phrases that forgive
layout"): what it means for a needle holding whitespace to occur in a text. Pure.

Definition: a needle (already folded, `folding.fold`) that holds none of the six `WHITESPACE`
characters occurs where it occurs as a substring. A needle that holds one (a *phrase*) is its
pieces with every run of whitespace in it matching any run (one or more) of whitespace in the
text: `"invoice  total"` finds "invoice total", "invoice\\r\\ntotal" and "invoice\\t \\ntotal".
Only these six characters are layout; every other character, punctuation and other Unicode
spaces included, is matched as written ("Punctuation spacing is content").

Rules:
1. `pattern` is the oracle: a regular expression over the folded text; its match offsets are
   offsets into the original text (folding keeps lengths). `spans` finds occurrences left to
   right without overlap, as `str.find` from the end of the previous one does for a plain
   needle; a run matched by the needle's whitespace is always the text's whole run (greedy),
   except where the search starts inside one.
2. The same occurrences, counted: `squeeze` maps each whitespace character to a space and
   collapses every run to one space (the databases do it with `replace`,
   `_sql.match.squeezed`). A phrase occurs in a text exactly when `squeeze(needle)` occurs in
   `squeeze(text)`, and the non-overlapping counts agree, so SQL can count with `replace`
   on squeezed text what `spans` finds.
3. `index_word` is the piece the search index is asked for: trigrams never hold layout.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = [
    "WHITESPACE",
    "first_word",
    "index_word",
    "is_phrase",
    "pattern",
    "spans",
    "squeeze",
    "squeeze_passes",
]

WHITESPACE = " \t\n\x0b\x0c\r"
"""Space, tab, LF, VT, FF, CR: what layout is."""
_RUN = re.compile("[" + re.escape(WHITESPACE) + "]+")
_SPLIT = re.compile("[" + re.escape(WHITESPACE) + "]+")


def is_phrase(needle: str) -> bool:
    """The needle holds layout (and so matches as a phrase)."""
    return any(char in needle for char in WHITESPACE)


@lru_cache(maxsize=256)
def pattern(needle: str) -> re.Pattern[str]:
    """The oracle's regular expression for a folded needle (rule 1)."""
    pieces = _SPLIT.split(needle)
    run = "[" + re.escape(WHITESPACE) + "]+"
    return re.compile(run.join(re.escape(piece) for piece in pieces))


def squeeze(text: str) -> str:
    """Every run of whitespace as one space (rule 2)."""
    return _RUN.sub(" ", text)


def squeeze_passes(chars: int) -> int:
    """How many `replace('  ', ' ')` passes collapse every run in a text of `chars` code
    points: a pass halves a run (rounding up), so `k` passes collapse runs of up to 2**k."""
    passes = 0
    while (1 << passes) < chars:
        passes += 1
    return passes


def spans(text: str, needle: str, start: int = 0) -> list[tuple[int, int]]:
    """The occurrences of a folded needle in a folded text at or after `start`, left to
    right without overlap, as `(start, end)` offsets (rule 1)."""
    found: list[tuple[int, int]] = []
    if not needle:
        return found
    if not is_phrase(needle):
        at = text.find(needle, start)
        while at >= 0:
            found.append((at, at + len(needle)))
            at = text.find(needle, at + len(needle))
        return found
    return [match.span() for match in pattern(needle).finditer(text, start)]


def first_span(text: str, needle: str, start: int = 0) -> tuple[int, int] | None:
    """The first occurrence at or after `start`, or None."""
    if not is_phrase(needle):
        at = text.find(needle, start) if needle else -1
        return None if at < 0 else (at, at + len(needle))
    match = pattern(needle).search(text, start)
    return None if match is None else match.span()


def first_word(needle: str) -> str:
    """The needle's first piece (empty when it starts with whitespace)."""
    return _SPLIT.split(needle)[0]


def index_word(needle: str) -> str:
    """The needle's longest piece (the first of the longest), what the index is asked for."""
    return max(_SPLIT.split(needle), key=len)
