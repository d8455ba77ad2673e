"""The relevance score of a search hit (docs/contract.md §9, "Order"): a BM25-family formula
whose every input is the hit's own searchable granted fields, or a constant.

For a query of terms t (folded, as matching folds them) and a hit whose searchable granted
fields are f, each with its text x_f (the field's first `SCORE_CHARS` code points, folded)
and its length n_f (the whole field's length in code points):

    occ(t, x)  = the occurrences of t in x, found left to right without overlap (`str.find`
                 from the end of the previous one), as matching finds them (a substring; a
                 phrase, a needle holding whitespace, with its runs of whitespace matching
                 any run in x: `layout.spans`);
    weight(o)  = 1 if the occurrence is a whole word (the code point before it and the one
                 after it are not word characters, or are the ends of x), else `PART_WEIGHT`;
                 a phrase counts the same way, as a whole;
    tf(t, f)   = sum of weight(o) over occ(t, x_f);
    norm(f)    = 1 - B + B * n_f / `AVERAGE_CHARS`;
    score      = sum over t, f of  tf * (K1 + 1) / (tf + K1 * norm(f))      (0 when tf = 0)

rounded to `DIGITS` decimal places (so two databases and the oracle agree exactly).

Rules:
1. No input depends on stored data beyond the hit's own granted fields: BM25's inverse document
   frequency and average length are collection statistics, which would let records the grant
   cannot see (other connections, ungranted streams, hidden or deleted records) reorder and
   rescore a grant's answers. `AVERAGE_CHARS` is a constant instead of an average, and no
   term is weighted by its frequency elsewhere (docs/decisions.md, "Relevance").
2. Word characters are those Python's `str.isalnum` accepts, and `_`.
3. Only the first `SCORE_CHARS` code points of a field are read: a hit's score costs the same
   whatever its fields' sizes. An occurrence must lie wholly inside them; the cut counts as an
   end of the text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .folding import fold
from .layout import spans

__all__ = [
    "AVERAGE_CHARS",
    "DIGITS",
    "K1",
    "PART_WEIGHT",
    "SCORE_CHARS",
    "B",
    "bound",
    "occurrence_weight",
    "score",
]

K1 = 1.2
B = 0.75
AVERAGE_CHARS = 256
PART_WEIGHT = 0.25
SCORE_CHARS = 4096
DIGITS = 9


def _wordy(char: str) -> bool:
    return char.isalnum() or char == "_"


def occurrence_weight(folded: str, needle: str) -> float:
    """tf of one folded needle in one folded text (rule 3's prefix already cut)."""
    total = 0.0
    for at, end in spans(folded, needle):
        whole = (at == 0 or not _wordy(folded[at - 1])) and (
            end == len(folded) or not _wordy(folded[end])
        )
        total += 1.0 if whole else PART_WEIGHT
    return total


def score(needles: Sequence[str], fields: Iterable[tuple[str, int]]) -> float:
    """The score of a hit: `needles` folded, `fields` as (text of at least the first
    `SCORE_CHARS` code points, whole length in code points) per searchable granted field."""
    total = 0.0
    for text, size in fields:
        folded = fold(text[:SCORE_CHARS])
        norm = 1 - B + B * size / AVERAGE_CHARS
        for needle in needles:
            tf = occurrence_weight(folded, needle)
            if tf:
                total += tf * (K1 + 1) / (tf + K1 * norm)
    return round(total, DIGITS)


def bound(fields: Iterable[tuple[Sequence[int], int]], weight: float) -> float:
    """A bound of `score` from the occurrence counts alone: `fields` as (occurrences of each
    needle in the field's folded first `SCORE_CHARS` code points, found as `occurrence_weight`
    finds them; whole length), in the order `score` is given them. Every occurrence weighed
    1 gives an upper bound, every one weighed `PART_WEIGHT` a lower one: the formula grows with
    tf, and the arithmetic is `score`'s, term by term in the same order, so the float sums and
    the rounding keep the bound's side (tf is a multiple of `PART_WEIGHT` either way)."""
    total = 0.0
    for counts, size in fields:
        norm = 1 - B + B * size / AVERAGE_CHARS
        for count in counts:
            tf = count * weight
            if tf:
                total += tf * (K1 + 1) / (tf + K1 * norm)
    return round(total, DIGITS)
