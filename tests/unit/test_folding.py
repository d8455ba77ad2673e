"""Tests of `pdpp_store._core.folding`: the per-code-point, length-preserving case fold."""

from __future__ import annotations

import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store._core.folding import FOLDING_NAME, UNICODE_VERSION, fold, fold_char

fold("É")  # builds the lazy table now, outside hypothesis's per-example deadline

# Arbitrary text, weighted towards what matters: astral characters, combining marks, sigmas.
texts = st.text(
    st.one_of(
        st.characters(),
        st.characters(min_codepoint=0x10000),
        st.characters(categories=["Mn", "Mc", "Me"]),
        st.sampled_from("ΣσςİıẞßKſﬁΐǅ"),  # noqa: RUF001
    )
)


def test_names() -> None:
    assert FOLDING_NAME == "pdpp-simple-fold-v2"
    assert UNICODE_VERSION.count(".") == 2


@given(texts)
def test_fold_preserves_length(text: str) -> None:
    assert len(fold(text)) == len(text)


@given(texts)
def test_fold_is_idempotent(text: str) -> None:
    assert fold(fold(text)) == fold(text)


@given(texts)
def test_fold_is_the_per_code_point_definition(text: str) -> None:
    assert fold(text) == "".join(fold_char(char) for char in text)


@given(st.text(st.characters(max_codepoint=0x7F)))
def test_ascii_fast_path_agrees_with_definition(text: str) -> None:
    assert fold(text) == "".join(fold_char(char) for char in text)


def test_every_code_point_folds_to_one_idempotent_code_point() -> None:
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:
            continue
        folded = fold_char(chr(code))
        assert len(folded) == 1
        assert fold_char(folded) == folded


def test_accented_letters_fold_alike() -> None:
    assert fold("Éx") == fold("éx") == "éx"


def test_sigma_folds_without_context() -> None:
    assert fold("ΣΑΣ") == "σασ"  # noqa: RUF001
    assert fold("ΟΔΟΣ ΟΔΟΣ.") == "οδοσ οδοσ."
    assert fold("ς") == "σ"  # noqa: RUF001
    # The whole-string lower() that fold must not use would give a final sigma here.
    assert "ΣΑΣ".lower() == "σας"


def test_characters_whose_fold_is_longer_stay_one_code_point() -> None:
    assert fold("İstanbul") == fold("ISTANBUL") == "istanbul"
    assert fold("ŉ") == "ŉ"
    assert fold("\u1fd3") == fold("\u0390") == "\u0390"
    assert fold("\u1fe3") == fold("\u03b0") == "\u03b0"
    assert fold("ǰ") == "ǰ"
    assert fold("ﬁ") == "ﬁ"


def test_every_code_point_whose_full_fold_changes_length_is_reviewed() -> None:
    """Each of them folds by exactly one rule of the definition: the precomposed form of its
    folding, U+0130 to 'i', its one-code-point lowercase, or itself; none to a code point that
    differs from both its lowercase and its folding's first letter."""
    import unicodedata

    reviewed = 0
    for code in range(sys.maxunicode + 1):
        char = chr(code)
        if 0xD800 <= code <= 0xDFFF or len(char.casefold()) == 1:
            continue
        reviewed += 1
        composed = unicodedata.normalize("NFC", char.casefold())
        if len(composed) == 1:
            expected = composed
        elif code == 0x130:
            expected = "i"
        elif len(char.lower()) == 1:
            expected = char.lower()
        else:
            expected = char
        assert fold_char(char) == expected, hex(code)
    assert reviewed >= 100


def test_sharp_s_forms_fold_alike() -> None:
    assert fold("ẞ") == fold("ß") == "ß"
    assert fold("STRAẞE") == fold("straße")


def test_compatibility_letters() -> None:
    assert fold("\u212a") == "k"  # KELVIN SIGN
    assert fold("ſ") == "s"  # noqa: RUF001


def test_lone_surrogates_are_kept() -> None:
    assert fold("A\ud800") == "a\ud800"


def test_match_offsets_carry_over() -> None:
    text = "Straße 🙂 ÉCOLE Σοφία"
    needle = "école σ"  # noqa: RUF001
    start = fold(text).index(fold(needle))
    assert text[start : start + len(needle)] == "ÉCOLE Σ"


def test_fold_char_takes_one_code_point() -> None:
    with pytest.raises(ValueError, match="one code point"):
        fold_char("ab")
