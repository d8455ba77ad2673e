"""The words of a field's scored prefix (docs/read-path.md, "The word index"): what the word
index stores, and how a term's tf is computed from it. Pure.

A *word* is a maximal run of word characters (`str.isalnum()` or `_`, as `relevance` says)
in a field's folded first `relevance.SCORE_CHARS` code points; a run cut by the prefix's end
is a word as it stands there (the cut is an end of the text). A *word term* is a folded
needle made only of word characters.

The identity the index rests on: an occurrence of a word term cannot cross a non-word
character, so it lies inside one word. It is a whole word exactly when it is that word, and a
word holds its occurrences (left to right, without overlap) as `str.count` counts them. So
for a word term t and a field f with word counts c_f:

    tf(t, f) = c_f[t] + PART_WEIGHT * sum over words w != t containing t of w.count(t) * c_f[w]

which is `relevance.occurrence_weight` of t in the field's folded prefix (tested against it).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping

from .folding import fold
from .relevance import K1, PART_WEIGHT, SCORE_CHARS

__all__ = [
    "MAX_WORD_CHARS",
    "OVERLONG",
    "SCORE_ERROR_FLOOR",
    "field_words",
    "is_word_term",
    "score_error",
    "term_weight",
    "tf",
]

_WORD = re.compile(r"\w+")
"""`\\w` on `str` is `str.isalnum()` or `_` (checked over every code point in the tests)."""

MAX_WORD_CHARS = 256
"""The longest word the index keeps (an index key has a bounded size: Postgres refuses a
B-tree entry past about 2,700 bytes). A field with a longer word keeps the others and says so
with one `OVERLONG` row: its tf cannot be computed from its words, and search scores it from
its text."""
OVERLONG = ""
"""The word of a field's row that says the field has words longer than `MAX_WORD_CHARS` (no
word is empty); its count is how many."""


def field_words(stored: str) -> Counter[str]:
    """The words of a field's scored prefix, with their counts (`stored` the field's text);
    words longer than `MAX_WORD_CHARS` are counted together under `OVERLONG`. Every write of
    a text-like field runs it (about 150 words of an email's body), so the words are counted
    in C (`Counter` of `findall`) and the overlong ones moved after, where any is."""
    counts = Counter(_WORD.findall(fold(stored[:SCORE_CHARS])))
    if counts and max(map(len, counts)) > MAX_WORD_CHARS:
        overlong = [word for word in counts if len(word) > MAX_WORD_CHARS]
        counts[OVERLONG] = sum(counts.pop(word) for word in overlong)
    return counts


def is_word_term(needle: str) -> bool:
    """The folded needle is made only of word characters (and so is scored from words)."""
    return bool(needle) and _WORD.fullmatch(needle) is not None


def term_weight(term: str, word: str) -> float:
    """What one occurrence of `word` in a field adds to the tf of word term `term`."""
    if word == term:
        return 1.0
    return PART_WEIGHT * word.count(term)


def tf(term: str, counts: Mapping[str, int] | Iterable[tuple[str, int]]) -> float:
    """tf of a word term from a field's word counts (the identity above)."""
    items = counts.items() if isinstance(counts, Mapping) else counts
    return sum(term_weight(term, word) * n for word, n in items if term in word)


SCORE_ERROR_FLOOR = 1e-11
"""The least `score_error` (the bound a fixed constant gave before, kept where it is larger)."""
_UNIT = 2.0**-53
"""The unit roundoff of a double."""


def _gamma(k: int) -> float:
    """Higham's gamma_k = k u / (1 - k u): a bound of the relative error of k roundings."""
    return k * _UNIT / (1 - k * _UNIT)


def score_error(parts: int) -> float:
    """A bound of how far the word index's float score of a record lies from the unrounded
    sum `relevance.score` computes for it, when the score has at most `parts` parts (terms
    times searched fields), each in [0, K1 + 1].

    Both compute each part as `tf * (K1 + 1) / (tf + K1 * norm)` from the same exact tf (a
    multiple of `PART_WEIGHT`) in doubles: at most 5 roundings each, so the two values of a
    part differ by at most 2 gamma_5 (K1 + 1). They add the n = `parts` parts in different
    orders (a sum per field, then over fields; or one running total): any order of summing n
    non-negative numbers lies within gamma_{n-1} times their sum of the exact sum, and the
    sum is at most n (K1 + 1), so two orders differ by at most 2 gamma_{n-1} n (K1 + 1).
    Together: 2 n (K1 + 1) (gamma_{n-1} + gamma_5), about 2 n^2 2^-53 (K1 + 1) for large n,
    which passes 1e-11 near n = 150 (never less than `SCORE_ERROR_FLOOR`)."""
    n = max(parts, 1)
    return max(SCORE_ERROR_FLOOR, 2 * n * (K1 + 1) * (_gamma(n - 1) + _gamma(5)))
