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
    assert FOLDING_NAME == "pdpp-simple-fold-v1"
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
    assert fold("İ") == "İ"
    assert len(fold("İstanbul")) == len("İstanbul")
    assert fold("ŉ") == "ŉ"


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
