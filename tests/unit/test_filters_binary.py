"""A string holding NUL compares like any string (filters rule 1), but no Postgres text can hold
it: `stored_text` is what the write path stores and a statement compares, one-to-one and free
of NUL, so every string the oracle tells apart stays apart in SQL."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pdpp_store._core.filters import stored_text

_STRINGS = st.text(st.sampled_from("\x00\x01\x02a"), max_size=8)


def test_ordinary_strings_are_stored_as_they_are() -> None:
    assert stored_text("héllo") == "héllo"
    assert stored_text("") == ""
    assert stored_text("a\x00b") == "\x01a\x01\x02b"
    assert stored_text("\x01") == "\x01\x01\x01"


@given(_STRINGS, _STRINGS)
def test_stored_text_is_one_to_one_and_holds_no_nul(a: str, b: str) -> None:
    assert "\x00" not in stored_text(a)
    assert (stored_text(a) == stored_text(b)) == (a == b)
