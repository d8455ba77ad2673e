"""Ingestion's speed-ups change how rows are written, never what is stored or found (issue 14,
part 3; issue 13's index at write time). Every test runs on every backend and front.

- Rows: the stored `fields` and `field_chunks` rows are exactly what the pure encoder
  (`encode_record`) says, for one batch and for one record per call alike, whatever the value:
  short, exactly a chunk, one over, non-BMP text at a boundary, JSON, binary and base64.
- The search index (SQLite: the store fills it itself) holds exactly the fields search may ask
  for: the manifest's `lexical_fields`, and any field longer than a match scan reads before it
  asks the index. Fields moving between indexed and not (updates, removals) leave it consistent
  (FTS5's own integrity check), and `q` and `search` find what the text holds at every step.
- A manifest that declares more searchable fields makes what is already stored searchable.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _data import MAILBOX, OTHER_MAILBOX, manifest, owner, run_alembic, setup_mailbox
from _fronts import StoreFront
from sqlalchemy import Connection, create_engine, text

from pdpp_store import NotFound, RecordRef, StoreError
from pdpp_store._core.manifest import Manifest
from pdpp_store._core.values import CHUNK_CHARS, encode_record
from pdpp_store._runtime import sync_url
from pdpp_store._sql.index import SCAN_CHUNKS

MESSAGES = "messages"
BIG = SCAN_CHUNKS * CHUNK_CHARS + 1
"""Code points of a field the index must hold even where search never asks for it."""
EMOJI = "\U0001f600"


@contextmanager
def _database(store: StoreFront) -> Iterator[Connection]:
    """A separate sync connection to the store's database, to read what is stored."""
    engine = create_engine(sync_url(store.engine.url.render_as_string(hide_password=False)))
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _message(record_id: str, **fields: Any) -> dict[str, Any]:
    return {"id": record_id, "thread_id": f"t-{record_id}", **fields}


def _corpus() -> list[dict[str, Any]]:
    """Messages whose values sit on every boundary of the layout."""
    exact = "a" * CHUNK_CHARS
    return [
        _message("short", subject="Invoice overdue", snippet="please pay", is_seen=True),
        _message("exact", subject=exact, snippet=exact[:-1] + EMOJI),
        _message("one-over", subject=exact + "Z", snippet=EMOJI * (CHUNK_CHARS + 1)),
        _message("boundary", subject="x" * (CHUNK_CHARS - 1) + EMOJI + "İstanbul"),
        _message("json", to=["ana@example.com", EMOJI], labels={"a": [1, 2.5, None]}, cc=None),
        _message("binary", references="nul\x00inside", snippet=""),
        _message("base64", references=base64.b64encode(bytes(range(256)) * 2).decode()),
        _message("big", references=("lorem ipsum " * (BIG // 12 + 1))[:BIG] + " needle"),
        _message("empty", subject="", to=[], labels={}),
    ]


def _spec() -> Any:
    spec = Manifest.from_dict(manifest("gmail")).spec(MESSAGES)
    assert spec is not None
    return spec


def _expected(records: list[dict[str, Any]]) -> tuple[set[tuple[Any, ...]], set[tuple[Any, ...]]]:
    """(fields rows, chunk rows) of `records` as the encoder makes them, without the connection."""
    spec = _spec()
    field_rows, chunk_rows = set(), set()
    for n, record in enumerate(records):
        encoded = encode_record(record, spec, n)
        for item in encoded.fields:
            key = (MESSAGES, encoded.record_id, item.path)
            field_rows.add(
                (
                    *key,
                    item.kind.value,
                    item.json_type,
                    item.size_chars,
                    item.size_bytes,
                    item.digest,
                    item.item_count,
                    item.mime_type,
                    item.blob_id,
                    item.time_value,
                )
            )
            for chunk in item.chunks():
                chunk_rows.add((*key, chunk.chunk_no, chunk.text, chunk.folded, chunk.lookahead))
    return field_rows, chunk_rows


def _stored(conn: Connection, connection_id: str) -> tuple[set[tuple[Any, ...]], ...]:
    fields = conn.execute(
        text(
            "SELECT stream, record_id, path, kind, json_type, size_chars, size_bytes, digest,"
            " item_count, mime_type, blob_id, time_value FROM fields WHERE connection_id = :c"
        ),
        {"c": connection_id},
    )
    chunks = conn.execute(
        text(
            "SELECT stream, record_id, path, chunk_no, text, folded, lookahead"
            " FROM field_chunks WHERE connection_id = :c"
        ),
        {"c": connection_id},
    )
    return {tuple(row) for row in fields}, {tuple(row) for row in chunks}


def _index_intact(conn: Connection) -> None:
    """SQLite: FTS5 checks its index (a delete of an entry it never had corrupts it)."""
    if conn.dialect.name == "sqlite":
        conn.execute(text("INSERT INTO search_chunks (search_chunks) VALUES ('integrity-check')"))


def _indexed_paths(conn: Connection, connection_id: str) -> dict[str, set[str]] | None:
    """SQLite: per record, the paths with an id in the index's side table (None elsewhere)."""
    if conn.dialect.name != "sqlite":
        return None
    found: dict[str, set[str]] = {}
    rows = conn.execute(
        text("SELECT record_id, path FROM search_fields WHERE connection_id = :c"),
        {"c": connection_id},
    )
    for record_id, path in rows:
        found.setdefault(record_id, set()).add(path)
    return found


def test_one_batch_and_one_record_per_call_store_what_the_encoder_says(store: StoreFront) -> None:
    setup_mailbox(store, MAILBOX, OTHER_MAILBOX)
    corpus = _corpus()
    assert store.upsert_records(MAILBOX, MESSAGES, corpus).inserted == len(corpus)
    for record in corpus:
        assert store.upsert_records(OTHER_MAILBOX, MESSAGES, [record]).inserted == 1
    expected = _expected(corpus)
    with _database(store) as conn:
        assert _stored(conn, MAILBOX) == expected
        assert _stored(conn, OTHER_MAILBOX) == expected
        _index_intact(conn)
    g = owner(MESSAGES)
    for q, key in (("overdue", "short"), ("istanbul", "boundary")):
        assert [hit.record_id for hit in store.search(g, q).hits] == [key]
    late = store.read_field_window(g, RecordRef(MAILBOX, MESSAGES, "big"), "references", q="needle")
    assert late.match_start_chars == BIG + 1


def test_the_index_holds_exactly_the_fields_search_may_ask_for(store: StoreFront) -> None:
    setup_mailbox(store)
    store.upsert_records(MAILBOX, MESSAGES, _corpus())
    lexical = set(_spec().lexical_fields)
    with _database(store) as conn:
        indexed = _indexed_paths(conn, MAILBOX)
    if indexed is None:
        return  # Postgres's index is the database's own, over every chunk
    text_like = {"short", "exact", "one-over", "boundary", "json", "empty"}
    for record in _corpus():
        paths = set(record) & lexical
        if record["id"] == "big":
            paths.add("references")  # longer than a match scan reads
        if record["id"] in text_like or record["id"] == "big":
            assert indexed.get(record["id"], set()) == paths, record["id"]
    assert "references" not in indexed.get("binary", set()) | indexed.get("base64", set())


def test_fields_moving_in_and_out_of_the_index_stay_found(store: StoreFront) -> None:
    """A field grows past the scan (indexed), shrinks (not), is removed, comes back; a lexical
    field changes. At every step q and search find exactly the current text."""
    setup_mailbox(store)
    g = owner(MESSAGES)
    ref = RecordRef(MAILBOX, MESSAGES, "m1")
    filler = "lorem ipsum " * (BIG // 12 + 1)
    versions: list[dict[str, Any]] = [
        _message("m1", subject="alpha", references=filler[:BIG] + "omega"),
        _message("m1", subject="beta", references="short omega"),
        _message("m1", subject="beta"),
        _message("m1", subject="gamma", references=filler[: BIG * 2] + "omega"),
        _message("m1", subject="gamma", references=filler[:BIG] + "omega"),
    ]
    for number, version in enumerate(versions):
        result = store.upsert_records(MAILBOX, MESSAGES, [version])
        assert (result.inserted, result.updated) == ((1, 0) if number == 0 else (0, 1))
        assert [h.record_id for h in store.search(g, version["subject"]).hits] == ["m1"]
        for gone in {"alpha", "beta", "gamma"} - {version["subject"]}:
            assert store.search(g, gone).hits == ()
        if "references" in version:
            window = store.read_field_window(g, ref, "references", q="omega")
            assert window.match_start_chars == version["references"].index("omega")
        else:
            with pytest.raises(NotFound):
                store.read_field_window(g, ref, "references", q="omega")
        with _database(store) as conn:
            _index_intact(conn)
            indexed = _indexed_paths(conn, MAILBOX)
        if indexed is not None:
            big = len(version.get("references", "")) > SCAN_CHUNKS * CHUNK_CHARS
            assert indexed["m1"] == {"subject"} | ({"references"} if big else set())
    store.delete_record(MAILBOX, MESSAGES, "m1")
    assert store.search(g, "gamma").hits == ()
    with _database(store) as conn:
        _index_intact(conn)


def test_declaring_more_searchable_fields_makes_stored_text_searchable(store: StoreFront) -> None:
    narrow = manifest("gmail")
    spec = next(s for s in narrow["streams"] if s["name"] == MESSAGES)
    wide = copy.deepcopy(narrow)
    spec["query"]["search"]["lexical_fields"] = ["subject"]
    store.register_manifest(narrow)
    store.add_connection(MAILBOX, narrow["connector_id"])
    stored = [_message("m1", subject="hello", snippet="zebra crossing")]
    store.upsert_records(MAILBOX, MESSAGES, stored)
    g = owner(MESSAGES)
    assert store.search(g, "zebra").hits == ()
    store.register_manifest(wide)
    assert [hit.record_id for hit in store.search(g, "zebra").hits] == ["m1"]
    store.upsert_records(MAILBOX, MESSAGES, [_message("m2", snippet="zebra stripes")])
    assert sorted(hit.record_id for hit in store.search(g, "zebra").hits) == ["m1", "m2"]
    store.register_manifest(wide)  # again: nothing new to index, nothing indexed twice
    with _database(store) as conn:
        _index_intact(conn)
        indexed = _indexed_paths(conn, MAILBOX)
    if indexed is not None:
        assert indexed == {"m1": {"subject", "snippet"}, "m2": {"snippet"}}


def test_a_store_indexed_by_the_old_rule_reads_and_rewrites_the_same(db_url: str) -> None:
    """Migration 0005's backfill indexes every text-like field (the rule before this one): a
    store brought there by downgrade and upgrade reads exactly as one written fresh, and
    rewriting, removing and adding its fields keeps the index intact and every read equal."""
    from pdpp_store import Store

    first, second = (
        _corpus(),
        [{**record, "thread_id": "rewritten"} for record in _corpus() if record["id"] != "json"],
    )
    second.append(_message("json", subject="now lexical too", to=["x@example.com"]))
    with Store.open(db_url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, MESSAGES, first)
        before = _stored_by_reads(store, first)
    run_alembic(db_url, "downgrade", "0004")
    run_alembic(db_url, "upgrade", "head")
    with Store.open(db_url) as store:
        assert _stored_by_reads(store, first) == before
        with _database(store) as conn:
            old_rule = _indexed_paths(conn, MAILBOX)
        if old_rule is not None:
            assert "thread_id" in old_rule["short"]  # every text-like field, searchable or not
        assert store.upsert_records(MAILBOX, MESSAGES, second).updated == len(second)
        with _database(store) as conn:
            _index_intact(conn)
            new_rule = _indexed_paths(conn, MAILBOX)
        if new_rule is not None:
            assert "thread_id" not in new_rule["short"]
        assert _stored_by_reads(store, second) == _fresh_reads(second)
        binary = _stored_by_reads(store, second)["binary/references"]
        assert binary[0] == "field_not_text"


def _stored_by_reads(store: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    """What the reads answer for `records`: each field's info and text, and search hits."""
    g = owner(MESSAGES)
    found: dict[str, Any] = {}
    for record in records:
        ref = RecordRef(MAILBOX, MESSAGES, record["id"])
        for path in record:
            try:
                window = store.read_field_window(g, ref, path, limit_chars=100_000)
            except StoreError as refused:  # binary-only: its metadata comes with the refusal
                found[f"{record['id']}/{path}"] = (refused.code, refused.details)
            else:
                found[f"{record['id']}/{path}"] = (window.field, window.text)
    for q in ("overdue", "istanbul", "lexical", EMOJI, "needle"):
        found[q] = [hit.record_id for hit in store.search(g, q).hits]
    return found


def _fresh_reads(records: list[dict[str, Any]]) -> dict[str, Any]:
    import tempfile

    from pdpp_store import Store

    with (
        tempfile.TemporaryDirectory() as directory,
        Store.open(f"sqlite:///{directory}/fresh.sqlite") as fresh,
    ):
        setup_mailbox(fresh)
        fresh.upsert_records(MAILBOX, MESSAGES, records)
        return _stored_by_reads(fresh, records)


def test_chunks_changed_outside_the_writes_keep_the_index_in_step(store: StoreFront) -> None:
    """The index follows any change of chunks, not only the store's writes (SQLite: the
    triggers; a field of at most `SCAN_CHUNKS` chunks is one row, deleted as it was and made
    again of the chunks left): a chunk's text rewritten, then a chunk deleted, in a field of two
    chunks and in a long one. Search (its index phase) and `q` find the text as it is."""
    from unittest import mock

    from pdpp_store._ops import search as search_ops

    setup_mailbox(store)
    g = owner(MESSAGES)
    two = "x" * CHUNK_CHARS + " zebra tail"
    long = "lorem ipsum " * ((BIG + 3 * CHUNK_CHARS) // 12) + "okapi"
    store.upsert_records(
        MAILBOX,
        MESSAGES,
        [_message("a", subject="nothing"), _message("m1", subject=two, references=long)],
    )

    def found(q: str) -> list[str]:
        with mock.patch.object(search_ops, "SCAN_RECORDS", 1):
            return [hit.record_id for hit in store.search(g, q).hits]

    assert found("zebra") == ["m1"]
    key = "connection_id = :c AND stream = :s AND record_id = 'm1'"
    params = {"c": MAILBOX, "s": MESSAGES}
    with _database(store) as conn:
        for path, chunk in (("subject", 1), ("references", SCAN_CHUNKS + 2)):
            conn.execute(  # the chunk, and the look-ahead of the one before it
                text(
                    "UPDATE field_chunks SET text = substr('quagga here' || text, 1, "
                    "length(text)), folded = substr('quagga here' || text, 1, length(text)) "
                    f"WHERE {key} AND path = :p AND chunk_no = :n"
                ),
                {**params, "p": path, "n": chunk},
            )
            conn.execute(
                text(
                    "UPDATE field_chunks SET lookahead = substr('quagga here' || lookahead, 1, "
                    f"length(lookahead)) WHERE {key} AND path = :p AND chunk_no = :n"
                ),
                {**params, "p": path, "n": chunk - 1},
            )
        conn.commit()
        _index_intact(conn)
    assert found("zebra") == []
    assert found("quagga") == ["m1"]
    ref = RecordRef(MAILBOX, MESSAGES, "m1")
    window = store.read_field_window(g, ref, "references", q="quagga")
    assert window.match_start_chars == (SCAN_CHUNKS + 2) * CHUNK_CHARS
    with _database(store) as conn:  # chunks deleted: what the index names, straight from it
        steps = (  # rows naming each term: the subject's (its first chunk's look-ahead holds
            # "quagga"), and the long field's chunks 33 (look-ahead) and 34
            ("path = 'subject' AND chunk_no = 1", {"quagga": 3, "xxx": 1}),
            ("path = 'references' AND chunk_no >= 1", {"quagga": 1, "xxx": 1}),
            ("path = 'subject'", {"quagga": 0, "xxx": 0}),
        )
        for which, named in steps:
            conn.execute(text(f"DELETE FROM field_chunks WHERE {key} AND {which}"), params)
            conn.commit()
            _index_intact(conn)
            if conn.dialect.name == "sqlite":
                assert {term: _named(conn, term) for term in named} == named, which
    store.upsert_records(MAILBOX, MESSAGES, [_message("m1", subject="zebra again")])
    with _database(store) as conn:
        _index_intact(conn)
    assert found("zebra") == ["m1"]
    assert found("xxx") == []


def _named(conn: Connection, term: str) -> int:
    """SQLite: how many rows of the search index are candidates for `term`."""
    from pdpp_store._sql.index import fts_query

    query = text("SELECT count(*) FROM search_chunks WHERE search_chunks MATCH :q")
    return int(conn.execute(query, {"q": fts_query(term)}).scalar_one())
