"""The words of a field's scored prefix (`_core.words`): a word term's tf computed from the
words alone equals the score's own tf (`relevance.occurrence_weight`) on drawn texts, words
cut at the prefix's end and overlong words included."""

from __future__ import annotations

import math
import random
import sys

from hypothesis import given
from hypothesis import strategies as st

from pdpp_store import fold
from pdpp_store._core import relevance, words

ALPHABET = "ab_1 .-\u0130i\u0131\u00df\u03a3\u03c3\u00e9\u00a0\n\u0663"
"""Word characters of several kinds (letters, a digit, `_`, an Arabic-Indic digit, letters
whose folds matter) and non-word ones (space, punctuation, no-break space, LF)."""


def test_word_characters_are_isalnum_or_underscore() -> None:
    """The pattern `_core.words` splits with agrees with `relevance`'s word characters over
    every code point."""
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        assert words.is_word_term(char) == (char.isalnum() or char == "_"), hex(code)


@given(
    text=st.text(ALPHABET, max_size=60),
    term=st.text(ALPHABET, min_size=1, max_size=4),
)
def test_tf_from_words_is_the_scores_tf(text: str, term: str) -> None:
    needle = fold(term)
    if not words.is_word_term(needle):
        return
    counts = words.field_words(text)
    assert words.OVERLONG not in counts
    expected = relevance.occurrence_weight(fold(text[: relevance.SCORE_CHARS]), needle)
    assert words.tf(needle, counts) == expected


@given(cut=st.integers(1, 6), tail=st.text("ab ", max_size=8), term=st.sampled_from(["a", "ab"]))
def test_a_word_cut_by_the_prefix_end_is_a_word_there(cut: int, tail: str, term: str) -> None:
    """A word running across the prefix's end counts as it stands in the prefix."""
    text = " " * (relevance.SCORE_CHARS - cut) + "ab" * 4 + tail
    counts = words.field_words(text)
    expected = relevance.occurrence_weight(fold(text[: relevance.SCORE_CHARS]), term)
    assert words.tf(term, counts) == expected


def test_overlong_words_are_counted_apart() -> None:
    long_word = "a" * (words.MAX_WORD_CHARS + 1)
    counts = words.field_words(f"{long_word} ab {long_word} {'b' * words.MAX_WORD_CHARS}")
    assert counts == {words.OVERLONG: 2, "ab": 1, "b" * words.MAX_WORD_CHARS: 1}


def test_word_terms() -> None:
    assert words.is_word_term("abc_1")
    assert not words.is_word_term("")
    assert not words.is_word_term("pg&e")
    assert not words.is_word_term("a b")
    assert not words.is_word_term("a.b")


def _parts(count: int, seed: int) -> list[float]:
    """`count` parts as the score computes them, from drawn tfs and field lengths."""
    rng = random.Random(seed)
    parts = []
    for _ in range(count):
        tf = rng.randint(1, 40) * relevance.PART_WEIGHT
        norm = 1 - relevance.B + relevance.B * rng.randint(1, 5000) / relevance.AVERAGE_CHARS
        parts.append(tf * (relevance.K1 + 1) / (tf + relevance.K1 * norm))
    return parts


def test_the_score_error_bounds_summation_orders_at_many_parts() -> None:
    """At 4,000 parts (terms times fields), sums of the same parts in four orders differ by
    more than the fixed 1e-11 a bound once was, and never by more than `score_error`; the
    bound grows with the parts count and is never below its floor."""
    count, widest = 4000, 0.0
    for seed in range(20):
        parts = _parts(count, seed)
        sums = []
        for order in (parts, parts[::-1], sorted(parts), sorted(parts, reverse=True)):
            total = 0.0
            for part in order:
                total += part
            sums.append(total)
        exact = math.fsum(parts)
        assert all(abs(total - exact) <= words.score_error(count) / 2 for total in sums)
        widest = max(widest, max(sums) - min(sums))
    assert widest > words.SCORE_ERROR_FLOOR  # the fixed bound would not hold here
    assert widest <= words.score_error(count)
    assert words.score_error(1) == words.SCORE_ERROR_FLOOR
    assert words.score_error(150) < words.score_error(400) < words.score_error(count)
