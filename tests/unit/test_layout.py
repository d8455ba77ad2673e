"""Tests of `pdpp_store._core.layout`: phrases that forgive layout. The regular expression
(`pattern`, `spans`) is the oracle; squeezing (`squeeze`, and the SQL that does it on both
databases, `_sql.match.squeezed`) must find and count exactly what it finds."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store._core.layout import (
    WHITESPACE,
    first_span,
    first_word,
    index_word,
    is_phrase,
    pattern,
    spans,
    squeeze,
    squeeze_passes,
)
from pdpp_store._core.relevance import occurrence_weight

# A small alphabet, so needles occur often: letters, layout, punctuation, and spaces that are
# not layout (no-break space, em space).
_CHARS = "ab.&" + WHITESPACE + "\u00a0\u2003"
texts = st.text(st.sampled_from(_CHARS), max_size=60)
runs = st.text(st.sampled_from(WHITESPACE), min_size=1, max_size=4)
words = st.text(st.sampled_from("ab.&\u00a0"), min_size=1, max_size=3)


@st.composite
def needles(draw: st.DrawFn) -> str:
    """Words joined by runs of layout, sometimes with layout before or after."""
    pieces = draw(st.lists(words, min_size=1, max_size=3))
    needle = pieces[0]
    for piece in pieces[1:]:
        needle += draw(runs) + piece
    if draw(st.booleans()):
        needle = draw(runs) + needle
    if draw(st.booleans()):
        needle += draw(runs)
    return needle


def _brute_first(text: str, needle: str, start: int) -> tuple[int, int] | None:
    """The oracle spelled out: the smallest start, then the longest end, of a slice that is the
    needle's pieces joined by runs of layout (each run of the needle one or more layout
    characters in the slice, everything else equal)."""
    shape = re.compile("[" + re.escape(WHITESPACE) + "]+")
    wanted = shape.split(needle)
    for begin in range(start, len(text) + 1):
        for end in range(len(text), begin - 1, -1):
            piece = text[begin:end]
            if shape.split(piece) == wanted and (
                # every run of the slice sits where the needle has one
                len(shape.findall(piece)) == len(shape.findall(needle))
            ):
                return begin, end
    return None


@given(texts, needles())
def test_squeezed_text_finds_and_counts_what_the_pattern_finds(text: str, needle: str) -> None:
    found = spans(text, needle)
    assert bool(found) == (squeeze(needle) in squeeze(text))
    # Counted as the databases count: `replace` of the squeezed needle in the squeezed text.
    squeezed = squeeze(text)
    removed = len(squeezed) - len(squeezed.replace(squeeze(needle), ""))
    assert removed // len(squeeze(needle)) == len(found)


@given(texts, needles(), st.integers(0, 61))
def test_the_first_span_is_the_brute_force_one(text: str, needle: str, start: int) -> None:
    assert first_span(text, needle, start) == _brute_first(text, needle, start)


@given(texts, needles())
def test_spans_are_left_to_right_without_overlap(text: str, needle: str) -> None:
    position = 0
    for begin, end in spans(text, needle):
        assert begin >= position
        assert first_span(text, needle, position) == (begin, end)
        assert squeeze(text[begin:end]) == squeeze(needle)
        position = end
    assert first_span(text, needle, position) is None


@given(texts, words)
def test_a_needle_without_layout_is_a_substring(text: str, needle: str) -> None:
    assert not is_phrase(needle)
    assert [begin for begin, _ in spans(text, needle)] == [
        m.start() for m in re.finditer(re.escape(needle), text)
    ]


def test_examples() -> None:
    assert spans("invoice is\r\noverdue", "invoice is overdue") == [(0, 19)]
    assert spans("invoice\t is   overdue", "invoice is overdue") == [(0, 21)]
    assert spans("invoice isoverdue", "invoice is overdue") == []
    # Punctuation spacing is content; other spaces are not layout.
    assert spans("PG&E", "pg & e".upper()) == []
    assert spans("PG & E", "PG&E") == []
    assert spans("PG &\nE", "PG & E") == [(0, 6)]
    assert spans("a\u00a0b", "a b") == []
    assert occurrence_weight("x a\n\nb y a b", "a b") == 2.0
    assert occurrence_weight("xa\nb", "a b") == 0.25
    assert first_word(" a b") == ""
    assert first_word("ab\ncd") == "ab"
    assert index_word("to the\tinvoice of") == "invoice"
    assert pattern("a  b").pattern == pattern("a\tb").pattern


@pytest.mark.parametrize("chars", [1, 2, 3, 4, 5, 1024, 1025, 2048, 4096])
def test_squeeze_passes_collapse_every_run(chars: int) -> None:
    passes = squeeze_passes(chars)
    text = " " * chars
    for _ in range(passes):
        text = text.replace("  ", " ")
    assert text == " "
    if passes:  # one pass fewer is not enough
        text = " " * chars
        for _ in range(passes - 1):
            text = text.replace("  ", " ")
        assert text != " "
