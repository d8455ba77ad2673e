"""Search queries (`_core.query`) and page cursors (`_core.cursor.mint_page/open_page`)."""

from __future__ import annotations

import pytest
from _data import assert_store_error, grant
from hypothesis import given
from hypothesis import strategies as st

from pdpp_store import CursorCodec, CursorKey, StoreError
from pdpp_store._core.cursor import mint_page, open_page
from pdpp_store._core.query import MAX_TERM_CHARS, page_binding, parse_query

CODEC = CursorCodec(CursorKey(1, b"k" * 32))


def test_terms_and_phrases() -> None:
    query = parse_query('  Invoice  "is  Overdue"\tinvoice x"y z"')
    assert [t.text for t in query.terms] == ["Invoice", "is  Overdue", "x", "y z"]
    assert [t.folded for t in query.terms] == ["invoice", "is  overdue", "x", "y z"]
    assert len(parse_query("x" * MAX_TERM_CHARS).terms) == 1


@pytest.mark.parametrize(
    "q", ["", " ", '"', '"a', '""', '" "', "a" * 257, "\x00", "1 2 3 4 5 6 7 8 9"]
)
def test_invalid_queries(q: str) -> None:
    with pytest.raises(StoreError) as caught:
        parse_query(q)
    assert_store_error(caught.value, "invalid_query", 400, "q")


@given(st.text(max_size=60))
def test_parse_never_crashes(q: str) -> None:
    code = None
    try:
        query = parse_query(q)
    except StoreError as error:
        code = error.code
    else:
        assert 1 <= len(query.terms) <= 8
        assert all(len(t.folded) == len(t.text) for t in query.terms)
    assert code in {None, "invalid_query"}


def test_page_cursor_round_trip_and_binding() -> None:
    g = grant({"name": "s"})
    binding = page_binding(g, parse_query("a b"), ["s"], None)
    key = ("c/1", "s", 'rec:"ü"')
    token = mint_page(CODEC, binding, key)
    assert open_page(CODEC, token, binding) == key
    others = [
        page_binding(g, parse_query("a"), ["s"], None),
        page_binding(g, parse_query("a b"), ["s"], "c"),
        page_binding(grant({"name": "s"}, grant_id="other"), parse_query("a b"), ["s"], None),
        page_binding(grant({"name": "s", "fields": ["x"]}), parse_query("a b"), ["s"], None),
    ]
    for other in others:
        with pytest.raises(StoreError):
            open_page(CODEC, token, other)
    with pytest.raises(StoreError):
        open_page(CursorCodec(CursorKey(1, b"j" * 32)), token, binding)
    # The folded query is the identity: case does not change it.
    assert page_binding(g, parse_query("A B"), ["s"], None) == binding
