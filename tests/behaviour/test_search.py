"""Search (docs/contract.md §9, "Search") on every backend and front: what is searched, the terms,
the evidence and its continuations, pages and their cursors, visibility, and the grant's schema.

The oracle of a hit is Python: a record matches when every folded term occurs in the folded
text of one of its searchable granted fields; an excerpt's offsets are `fold(text).find(term)`.
"""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from _data import MAILBOX, assert_store_error, body, grant, owner, ref_id, setup_mailbox
from _fronts import StoreFront

from pdpp_store import GrantSchema, SearchPage, StoreError, fold

BODIES = "message_bodies"
OWNER = owner()


def _page(store: StoreFront, q: str, g: Any = OWNER, **args: Any) -> dict[str, Any]:
    page = store.search(g, q, **args)
    assert isinstance(page, SearchPage)
    data: dict[str, Any] = page.to_dict()
    jsonschema.validate(data, SearchPage.JSON_SCHEMA)
    return data


def _all_ids(store: StoreFront, q: str, g: Any = OWNER, **args: Any) -> list[str]:
    """Every hit, page after page, each next page read by replaying the page's `next`
    continuation (the same call with its `cursor`)."""
    ids: list[str] = []
    data = _page(store, q, g, **args)
    while True:
        ids.extend(hit["id"] for hit in data["data"])
        if not data["has_more"]:
            assert data["next_cursor"] is None
            assert data["next"] is None
            return ids
        following = data["next"]
        assert following["operation"] == "search"
        assert following["resource_uri"] is None
        arguments = dict(following["arguments"])
        assert arguments.pop("cursor") == data["next_cursor"]
        assert arguments.pop("q") == q
        assert arguments == {"limit": args.get("limit", 10), **args}
        data = _page(store, q, g, cursor=data["next_cursor"], **arguments)


def _check_evidence(store: StoreFront, hit: dict[str, Any], texts: dict[str, str], g: Any) -> None:
    """Every excerpt is a real first occurrence, its preview is the text at its offsets, and its
    continuation (and resource URI) returns a window holding the same match."""
    for excerpt in hit["evidence_excerpts"]:
        text = texts[excerpt["field_path"]]
        term = excerpt["read"]["arguments"]["q"]
        start = excerpt["match_start_chars"]
        assert fold(text).find(fold(term)) == start
        assert excerpt["match_end_chars"] == start + len(term)
        assert excerpt["total_chars"] == len(text)
        assert text[excerpt["start_chars"] : excerpt["end_chars"]] == excerpt["preview_text"]
        assert excerpt["start_chars"] <= start < excerpt["match_end_chars"] <= excerpt["end_chars"]
        read = excerpt["read"]
        assert read["operation"] == "read_field_window"
        args = dict(read["arguments"])
        window = store.read_field_window(g, args.pop("record"), args.pop("field"), **args)
        envelope = window.to_dict()["window"]
        assert (envelope["match_start_chars"], envelope["match_end_chars"]) == (
            start,
            excerpt["match_end_chars"],
        )
        assert window.field.digest == excerpt["digest"]
        by_uri = store.read_resource(g, read["resource_uri"]).to_dict()["window"]
        assert by_uri["start_chars"] <= start
        assert excerpt["match_end_chars"] <= by_uri["end_chars"]


def test_a_hit_carries_proven_evidence(store: StoreFront) -> None:
    setup_mailbox(store)
    texts = {
        "e1": "Hello, the INVOICE for March is overdue. Please pay the invoice.",
        "e2": "Nothing to see here.",
        "e3": "overdue library books, no invoice anywhere... wait: Invoice!",
    }
    store.upsert_records(MAILBOX, BODIES, [body(k, v) for k, v in texts.items()])
    data = _page(store, "invoice overdue")
    # The same whole-word occurrences, received at the same time: the shorter text ranks first.
    assert [hit["id"] for hit in data["data"]] == [ref_id("e3"), ref_id("e1")]
    assert data["data"][0]["score"] > data["data"][1]["score"]
    data["data"].reverse()
    assert data["has_more"] is False
    assert data["next_cursor"] is None
    first = data["data"][0]
    assert first["object"] == "search_result"
    assert (first["stream"], first["record_key"], first["connection_id"]) == (BODIES, "e1", MAILBOX)
    assert first["matched_fields"] == ["body_text"]
    excerpt = first["evidence_excerpts"][0]
    assert (excerpt["match_start_chars"], excerpt["match_end_chars"]) == (11, 18)
    assert first["snippet"] == excerpt["preview_text"]
    assert "<" not in first["snippet"]
    for hit in data["data"]:
        _check_evidence(store, hit, {"body_text": texts[hit["record_key"]]}, OWNER)


def test_every_term_is_required_and_may_be_in_different_fields(store: StoreFront) -> None:
    setup_mailbox(store)
    messages = [
        {"id": "m1", "thread_id": "t", "subject": "Invoice 42", "snippet": "it is overdue"},
        {"id": "m2", "thread_id": "t", "subject": "Invoice 43", "snippet": "paid, thanks"},
        {"id": "m3", "thread_id": "t", "subject": "Lunch", "snippet": "overdue and invoice"},
    ]
    store.upsert_records(MAILBOX, "messages", messages)
    g = owner("messages")
    data = _page(store, "invoice overdue", g)
    assert [hit["record_key"] for hit in data["data"]] == ["m1", "m3"]
    m1 = data["data"][0]
    assert m1["matched_fields"] == ["subject", "snippet"]
    terms = [e["read"]["arguments"]["q"] for e in m1["evidence_excerpts"]]
    assert terms == ["invoice", "overdue"]
    # m3: both terms in the snippet; the excerpt is the first term of the query found there.
    m3 = data["data"][1]["evidence_excerpts"][0]
    assert (m3["field_path"], m3["read"]["arguments"]["q"], m3["match_start_chars"]) == (
        "snippet",
        "invoice",
        12,
    )
    for hit in data["data"]:
        record = next(m for m in messages if m["id"] == hit["record_key"])
        _check_evidence(store, hit, {k: str(v) for k, v in record.items()}, g)


def test_phrases_and_short_terms(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(
        MAILBOX,
        BODIES,
        [body("a", "the invoice is overdue"), body("b", "overdue: is the invoice? x")],
    )
    assert _all_ids(store, '"invoice is overdue"') == [ref_id("a")]
    assert _all_ids(store, '"INVOICE IS" x') == []
    assert _all_ids(store, "x") == [ref_id("b")]
    assert _all_ids(store, "is ?") == [ref_id("b")]
    assert _all_ids(store, "Invoice invoice INVOICE") == [ref_id("a"), ref_id("b")]


def test_needles_across_chunk_boundaries(store: StoreFront) -> None:
    setup_mailbox(store)
    short = "boundary"
    long_term = "".join(chr(ord("a") + i % 26) for i in range(200))
    texts = {
        "s": "0" * 1020 + short + "0" * 50,
        "l": "1" * 950 + long_term + "1" * 2000,
        "far": "2" * 5000 + long_term.upper() + "2",
    }
    store.upsert_records(MAILBOX, BODIES, [body(k, v) for k, v in texts.items()])
    data = _page(store, short)
    assert [h["record_key"] for h in data["data"]] == ["s"]
    assert data["data"][0]["evidence_excerpts"][0]["match_start_chars"] == 1020
    data = _page(store, long_term)
    # "l" holds it in its first SCORE_CHARS code points, "far" beyond them (score 0).
    assert [h["record_key"] for h in data["data"]] == ["l", "far"]
    assert data["data"][1]["score"] == 0
    for hit in data["data"]:
        _check_evidence(store, hit, {"body_text": texts[hit["record_key"]]}, OWNER)


def test_pages_never_skip_or_repeat(store: StoreFront) -> None:
    setup_mailbox(store)
    records = [body(f"r{i:03d}", "match" if i % 3 else "other") for i in range(40)]
    store.upsert_records(MAILBOX, BODIES, records)
    expected = [ref_id(f"r{i:03d}") for i in range(40) if i % 3]
    for limit in (1, 7, 26, 50):
        assert _all_ids(store, "match", limit=limit) == expected
    assert len(expected) == 26
    first = _page(store, "match", limit=25)
    assert len(first["data"]) == 25
    assert first["has_more"]
    assert _page(store, "match", limit=26)["has_more"] is False


def test_page_cursors_are_bound_to_grant_query_and_filters(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, BODIES, [body(f"r{i}", "match") for i in range(3)])
    cursor = _page(store, "match", limit=1)["next_cursor"]
    assert cursor
    other = grant({"name": BODIES, "instance_ids": [MAILBOX]}, grant_id="g-other")
    attempts: list[tuple[Any, str, dict[str, Any]]] = [
        (OWNER, "matches", {}),
        (other, "match", {}),
        (OWNER, "match", {"connection_id": MAILBOX}),
    ]
    for g, q, extra in attempts:
        with pytest.raises(StoreError) as caught:
            store.search(g, q, limit=1, cursor=cursor, **extra)
        assert_store_error(caught.value, "invalid_cursor", 400, "cursor")
    bad_cursors: list[Any] = ["", "garbage", cursor[:-2], cursor + "A", 5]
    for bad in bad_cursors:
        with pytest.raises(StoreError) as caught:
            store.search(OWNER, "match", cursor=bad)
        assert_store_error(caught.value, "invalid_cursor", 400, "cursor")
    window_cursor = store.read_field_window(OWNER, ref_id("r0"), "body_text", limit_chars=1)
    assert window_cursor.next_cursor
    with pytest.raises(StoreError) as caught:
        store.search(OWNER, "match", cursor=window_cursor.next_cursor)
    assert_store_error(caught.value, "invalid_cursor", 400, "cursor")


@pytest.mark.parametrize(
    ("q", "code"),
    [
        ("", "invalid_query"),
        ("   ", "invalid_query"),
        ("a b c d e f g h i", "invalid_query"),
        ("x" * 257, "invalid_query"),
        ("nul\x00", "invalid_query"),
        ('"unterminated', "invalid_query"),
        ('"" x', "invalid_query"),
        ("lone \ud800", "invalid_query"),
        (None, "invalid_request"),
        (42, "invalid_request"),
    ],
)
def test_bad_queries_are_typed_errors_naming_q(store: StoreFront, q: Any, code: str) -> None:
    setup_mailbox(store)
    with pytest.raises(StoreError) as caught:
        store.search(OWNER, q)
    assert_store_error(caught.value, code, 400, "q")


def test_bad_options(store: StoreFront) -> None:
    setup_mailbox(store)
    bad_limits: list[Any] = [0, 51, True, "3"]
    for limit in bad_limits:
        with pytest.raises(StoreError) as caught:
            store.search(OWNER, "x", limit=limit)
        assert_store_error(caught.value, "invalid_request", 400, "limit")
    with pytest.raises(StoreError) as caught:
        store.search(OWNER, "x", streams=["messages"])
    assert_store_error(caught.value, "grant_stream_not_allowed", 403, "stream")
    with pytest.raises(StoreError) as caught:
        store.search(OWNER, "x", connection_id="cin_elsewhere")
    assert_store_error(caught.value, "connection_not_found", 404, "connection_id")
    assert _all_ids(store, "x", limit=50, streams=[BODIES], connection_id=MAILBOX) == []
    assert _all_ids(store, "a b c d e f g h") == []


def test_visibility_is_the_grant_s(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX, "cin_other")
    store.upsert_records(
        MAILBOX,
        BODIES,
        [
            body("old", "invoice", "2020-01-01T00:00:00Z"),
            body("new", "invoice", "2026-03-01T00:00:00Z"),
            body("gone", "invoice"),
            body("kept", "invoice"),
        ],
    )
    store.upsert_records("cin_other", BODIES, [body("x", "invoice")])
    store.delete_record(MAILBOX, BODIES, "gone")
    assert sorted(_all_ids(store, "invoice")) == [ref_id(i) for i in ("kept", "new", "old")]
    both = grant({"name": BODIES})
    assert sorted(_all_ids(store, "invoice", both)) == [
        *(ref_id(i) for i in ("kept", "new", "old")),
        ref_id("x", "cin_other"),
    ]
    assert sorted(_all_ids(store, "invoice", both, connection_id="cin_other")) == [
        ref_id("x", "cin_other")
    ]
    timed = grant(
        {
            "name": BODIES,
            "instance_ids": [MAILBOX],
            "time_constraint": {"field": "message_received_at", "since": "2025-01-01"},
        }
    )
    assert sorted(_all_ids(store, "invoice", timed)) == [ref_id("kept"), ref_id("new")]
    picked = grant({"name": BODIES, "instance_ids": [MAILBOX], "resources": ["old", "gone"]})
    assert sorted(_all_ids(store, "invoice", picked)) == [ref_id("old")]


def test_only_declared_granted_fields_are_searched(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(
        MAILBOX,
        BODIES,
        [
            {**body("html", "plain"), "body_html": "<p>secret</p>"},
            {**body("txt", "secret"), "body_html": None},
        ],
    )
    # body_html is declared but not a lexical field; message_id is undeclared for search.
    assert _all_ids(store, "secret") == [ref_id("txt")]
    assert _all_ids(store, "m-html") == []
    narrow = grant({"name": BODIES, "instance_ids": [MAILBOX], "fields": ["id", "body_html"]})
    assert _all_ids(store, "secret", narrow) == []
    assert _all_ids(store, "plain", narrow) == []


def test_describe_grant(store: StoreFront) -> None:
    setup_mailbox(store)
    narrow = grant(
        {"name": "messages", "instance_ids": [MAILBOX], "fields": ["id", "subject", "labels"]},
        {"name": "attachments", "instance_ids": [MAILBOX]},
        {"name": "no_such_stream"},
    )
    schema = store.describe_grant(narrow)
    assert isinstance(schema, GrantSchema)
    data = schema.to_dict()
    jsonschema.validate(data, GrantSchema.JSON_SCHEMA)
    streams = {s["name"]: s for s in data["streams"]}
    assert list(streams) == ["attachments", "messages", "no_such_stream"]
    messages = streams["messages"]
    assert messages["connection_ids"] == [MAILBOX]
    assert [f["path"] for f in messages["fields"]] == ["id", "labels", "subject"]
    assert messages["searchable_fields"] == ["subject"]
    blob_ref = next(f for f in streams["attachments"]["fields"] if f["path"] == "blob_ref")
    assert blob_ref["text_like"] is False
    assert blob_ref["searchable"] is False
    assert streams["attachments"]["searchable_fields"] == [
        "content_id",
        "content_type",
        "filename",
    ]
    ghost = streams["no_such_stream"]
    assert {key: ghost[key] for key in ("connection_ids", "searchable_fields", "fields")} == {
        "connection_ids": [],
        "searchable_fields": [],
        "fields": [],
    }
    assert ghost["record_count"] == 0


def test_the_index_phase_finds_matches_in_any_chunk(store: StoreFront) -> None:
    """With the first phase cut to one record, hits after it come from the index: matches in a
    later chunk, straddling a boundary, in records far apart (compared as sets: their order is
    relevance's). (Regression: the
    index's rowid is split into field and chunk by integer division; a float division paired
    every chunk after the first with no field, so r07 and r19 were lost.)"""
    from unittest import mock

    from pdpp_store._ops import search as search_ops

    setup_mailbox(store)
    filler = "0123456789 " * 400
    records = [body(f"r{i:02d}", filler[: 1000 + i * 97]) for i in range(30)]
    records[7] = body("r07", filler[:2500] + "Wombat" + filler[:10])  # in chunk 2
    records[19] = body("r19", filler[:1021] + "wOMBAT")  # across the first boundary
    records[28] = body("r28", "wombat " + filler)  # in chunk 0
    store.upsert_records(MAILBOX, BODIES, records)
    wanted = [ref_id(i) for i in ("r07", "r19", "r28")]
    for scan in (1, 2, 1000):
        with mock.patch.object(search_ops, "SCAN_RECORDS", scan):
            assert sorted(_all_ids(store, "wombat", limit=2)) == wanted
            assert sorted(_all_ids(store, "wombat 0123")) == wanted
            assert sorted(_all_ids(store, "wo")) == wanted  # too short for the index: scanned
    # Candidates in batches: with a batch of one, every candidate is its own batch.
    with mock.patch.object(search_ops, "SCAN_RECORDS", 1):
        with mock.patch.object(search_ops, "CANDIDATE_BATCH", 1):
            assert sorted(_all_ids(store, "wombat")) == wanted
        # The index only narrows: a rewritten record loses its hit, a deleted one is gone.
        store.upsert_records(MAILBOX, BODIES, [body("r07", filler[:3000])])
        store.delete_record(MAILBOX, BODIES, "r19")
        assert sorted(_all_ids(store, "wombat")) == [ref_id("r28")]


def test_evidence_in_fields_longer_than_the_page_scan(store: StoreFront) -> None:
    """A page's evidence scans the first `SCAN_CHUNKS` chunks of every field at once; in a
    longer field, the first term occurring only past them is still the evidence (not a later
    term found early), and a term only past them is still found."""
    from pdpp_store._sql.index import SCAN_CHUNKS

    setup_mailbox(store)
    filler = "lorem ipsum dolor " * ((SCAN_CHUNKS * 1024) // 18 + 200)
    texts = {
        "late-first": "Beta early. " + filler + " Alpha late, beta again.",
        "only-late": filler + " alpha and beta at the end",
        "early": "alpha then beta. " + filler,
        "short": "beta before alpha",
    }
    store.upsert_records(MAILBOX, BODIES, [body(k, v) for k, v in texts.items()])
    data = _page(store, "alpha beta")
    assert sorted(hit["record_key"] for hit in data["data"]) == sorted(texts)
    for hit in data["data"]:
        excerpt = hit["evidence_excerpts"][0]
        assert excerpt["read"]["arguments"]["q"] == "alpha"  # the query's first term
        _check_evidence(store, hit, {"body_text": texts[hit["record_key"]]}, OWNER)
