"""Phrases that forgive layout (docs/contract.md §9 and §3 `q`; docs/decisions.md "Phrases
that forgive layout"), on every backend and front: a quoted phrase in `search`, and a `q`
holding whitespace in `read_field_window`, match where the text's words are separated by any
run of space, tab, LF, VT, FF or CR; the evidence and windows give the exact span.

The oracle is `pdpp_store._core.layout` (a regular expression over the folded text, tested
against a brute-force one in tests/unit/test_layout.py); scores are `_core.relevance`'s."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from _data import MAILBOX, body, owner, ref_id, setup_mailbox
from _fronts import StoreFront

from pdpp_store import SearchPage, StoreError, fold
from pdpp_store._core import relevance
from pdpp_store._core.layout import first_span, spans
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._sql.index import SCAN_CHUNKS

BODIES = "message_bodies"
BODY = "body_text"
OWNER = owner()
FILLER = "0123456789 ,.;-" * 3000
"""Background text without letters: a phrase of letters occurs only where placed."""


def _hits(store: StoreFront, q: str, **args: Any) -> list[dict[str, Any]]:
    page = store.search(OWNER, q, limit=50, **args)
    assert isinstance(page, SearchPage)
    data: dict[str, Any] = page.to_dict()
    assert data["has_more"] is False
    hits: list[dict[str, Any]] = data["data"]
    return hits


def _check(store: StoreFront, hits: list[dict[str, Any]], texts: dict[str, str], q: str) -> None:
    """Each hit's excerpt is the oracle's first span of its term, its preview the text there,
    its score the formula's, and its `read` continuation a window on the same span."""
    for hit in hits:
        text = texts[hit["record_key"]]
        needles = [fold(q.strip('"'))] if q.startswith('"') else [fold(w) for w in q.split()]
        assert hit["score"] == relevance.score(needles, [(text, len(text))])
        excerpt = hit["evidence_excerpts"][0]
        term = excerpt["read"]["arguments"]["q"]
        span = first_span(fold(text), fold(term))
        assert span is not None
        assert (excerpt["match_start_chars"], excerpt["match_end_chars"]) == span
        assert text[excerpt["start_chars"] : excerpt["end_chars"]] == excerpt["preview_text"]
        args = dict(excerpt["read"]["arguments"])
        window = store.read_field_window(OWNER, args.pop("record"), args.pop("field"), **args)
        envelope = window.to_dict()["window"]
        assert (envelope["match_start_chars"], envelope["match_end_chars"]) == span
        assert envelope["text"] == text[envelope["start_chars"] : envelope["end_chars"]]
        assert envelope["end_chars"] == min(len(text), span[1] + 1024)


def test_a_quoted_phrase_forgives_line_breaks_tabs_and_spaces(store: StoreFront) -> None:
    setup_mailbox(store)
    texts = {
        "lf": "Dear all, the invoice is\noverdue again.",
        "crlf": "the invoice is\r\noverdue",
        "tabs": "Invoice\t is \t\t OVERDUE",
        "spaces": "x invoice    is     overdue",
        "ff-vt": "invoice\x0c\x0bis\roverdue",
        "start-end": "invoice\nis\noverdue",
        "glued": "the invoice isoverdue",
        "nbsp": "the invoice is\u00a0overdue",
        "apart": "invoice is. overdue",
    }
    store.upsert_records(MAILBOX, BODIES, [body(k, v) for k, v in texts.items()])
    q = '"invoice is overdue"'
    hits = _hits(store, q)
    wanted = {"lf", "crlf", "tabs", "spaces", "ff-vt", "start-end"}
    assert {hit["record_key"] for hit in hits} == wanted
    _check(store, hits, texts, q)
    # The whole field, from its first to its last character.
    whole = next(hit for hit in hits if hit["record_key"] == "start-end")
    excerpt = whole["evidence_excerpts"][0]
    assert (excerpt["match_start_chars"], excerpt["match_end_chars"]) == (0, 18)
    # Layout inside the phrase as written is forgiven the same way.
    assert {hit["record_key"] for hit in _hits(store, '"invoice \r\n is\toverdue"')} == wanted
    # With another term, and with `count`.
    page = store.search(OWNER, '"invoice is overdue" again', count="exact").to_dict()
    assert [hit["record_key"] for hit in page["data"]] == ["lf"]
    assert page["count"] == {"kind": "exact", "value": 1}


def test_punctuation_spacing_is_content(store: StoreFront) -> None:
    setup_mailbox(store)
    texts = {"glued": "bill from PG&E", "spaced": "bill from PG & E", "broken": "PG &\nE bill"}
    store.upsert_records(MAILBOX, BODIES, [body(k, v) for k, v in texts.items()])
    assert [h["record_key"] for h in _hits(store, "PG&E")] == ["glued"]
    assert {h["record_key"] for h in _hits(store, '"PG & E"')} == {"spaced", "broken"}
    assert {h["record_key"] for h in _hits(store, "PG E")} == set(texts)
    _check(store, _hits(store, '"PG & E"'), texts, '"PG & E"')


def test_phrases_across_chunk_boundaries(store: StoreFront) -> None:
    setup_mailbox(store)
    texts = {
        # The run of layout straddles the first boundary.
        "run": "0" * (CHUNK_CHARS - 9) + "wombat \r\n\r\n   burrow" + "1" * 40,
        # The phrase starts in a chunk and its second word is in the next one.
        "words": "2" * (CHUNK_CHARS - 3) + "wombat\nburrow tail",
        # A run of nearly a chunk: the phrase ends inside the next chunk.
        "long-run": "3" * 500 + "wombat" + " " * 1000 + "\nburrow",
        # Far past the page scan, in a later chunk pair.
        "far": FILLER[: (SCAN_CHUNKS + 3) * CHUNK_CHARS - 4] + "WOMBAT\t\tburrow.",
        "not": "wombat. burrow",
    }
    store.upsert_records(MAILBOX, BODIES, [body(k, v) for k, v in texts.items()])
    q = '"wombat burrow"'
    hits = _hits(store, q)
    assert {hit["record_key"] for hit in hits} == {"run", "words", "long-run", "far"}
    _check(store, hits, texts, q)
    # The index's phase of search (the first phase cut to one record) finds them too.
    from pdpp_store._ops import search as search_ops

    with mock.patch.object(search_ops, "SCAN_RECORDS", 1):
        assert {hit["record_key"] for hit in _hits(store, q)} == {
            "run",
            "words",
            "long-run",
            "far",
        }


def test_match_windows_follow_the_same_rule(store: StoreFront) -> None:
    """`read_field_window` with a `q` holding whitespace: the first span, the window around
    it sized by the span, the next match by its cursor, `occurrence`, and `query_not_found`."""
    setup_mailbox(store)
    late = (SCAN_CHUNKS + 2) * CHUNK_CHARS
    text = (
        "due now\r\n"
        + FILLER[:1500]
        + "Due\t\tNow"
        + FILLER[: late - 1500]
        + "due \n now"
        + FILLER[:100]
    )
    store.upsert_records(MAILBOX, BODIES, [body("r", text)])
    found = spans(fold(text), "due now")
    assert len(found) == 3
    record = ref_id("r")
    window = store.read_field_window(OWNER, record, BODY, q="DUE NOW", before_chars=5).to_dict()
    envelope = window["window"]
    assert (envelope["match_start_chars"], envelope["match_end_chars"]) == found[0]
    # The window holds the span and the context after it, measured from the span's end.
    assert envelope["end_chars"] == found[0][1] + 2048
    seen = [found[0]]
    cursor = envelope["next_match_cursor"]
    while cursor is not None:
        if len(seen) == len(found):  # a match cursor past the last occurrence
            with pytest.raises(StoreError) as past:
                store.read_field_window(OWNER, record, BODY, cursor=cursor)
            assert past.value.code == "query_not_found"
            break
        page = store.read_field_window(OWNER, record, BODY, cursor=cursor).to_dict()
        match = page["window"]
        seen.append((match["match_start_chars"], match["match_end_chars"]))
        assert match["text"] == text[match["start_chars"] : match["end_chars"]]
        cursor = match["next_match_cursor"]
    assert seen == found
    third = store.read_field_window(OWNER, record, BODY, q="due now", occurrence=3).to_dict()
    assert (third["window"]["match_start_chars"], third["window"]["match_end_chars"]) == found[2]
    # Without the index (a needle starting with layout): scanned, found. Each next occurrence
    # starts at or after the previous one's start + 1, as for every needle, so a run of
    # layout before the word is met again, shorter (docs/decisions.md).
    hops, at = [], 0
    while (span := first_span(fold(text), " now", at)) is not None:
        hops.append(span)
        at = span[0] + 1
    assert hops[:4] == [(3, 7), (1512, 1517), (1513, 1517), (34836, 34842)]
    for occurrence in (1, 4, len(hops)):
        window = store.read_field_window(OWNER, record, BODY, q=" now", occurrence=occurrence)
        envelope = window.to_dict()["window"]
        got = (envelope["match_start_chars"], envelope["match_end_chars"])
        assert got == hops[occurrence - 1]
    with pytest.raises(StoreError) as missing:
        store.read_field_window(OWNER, record, BODY, q="due now later")
    assert missing.value.code == "query_not_found"
