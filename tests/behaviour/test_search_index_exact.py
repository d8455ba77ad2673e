"""SQLite's search index after migration 0007 (whole-field rows).

FTS5's `integrity-check` cannot see a contentless 'delete' given the wrong text, so these tests
compare the index entry by entry (`fts5vocab`, 'instance': every (trigram, rowid)) with an index
built afresh from the chunks as they are, and search's answers with a plain substring oracle.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from _data import MAILBOX, body, owner, setup_mailbox
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, create_engine, text

from pdpp_store import Store
from pdpp_store._core.values import CHUNK_CHARS
from pdpp_store._ops import search as search_ops
from pdpp_store._runtime import sync_url
from pdpp_store._sql.index import SCAN_CHUNKS, index_rows

STREAM = "message_bodies"
TERMS = ("okapi", "zebra", "quagga")


@contextmanager
def _database(url: str) -> Iterator[Connection]:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            yield conn
    finally:
        engine.dispose()


def _entries(conn: Connection, table: str) -> set[tuple[str, int]]:
    conn.execute(
        text(f"CREATE VIRTUAL TABLE temp.v_{table} USING fts5vocab(main, {table}, 'instance')")
    )
    try:
        rows = conn.execute(text(f"SELECT term, doc FROM temp.v_{table}"))
        return {(str(term), int(doc)) for term, doc in rows}
    finally:
        conn.execute(text(f"DROP TABLE temp.v_{table}"))


def _index_matches_chunks(url: str) -> None:
    """The index holds exactly the (trigram, rowid) entries a fresh build from the chunks holds."""
    with _database(url) as conn:
        conn.execute(text("INSERT INTO search_chunks (search_chunks) VALUES ('integrity-check')"))
        conn.execute(
            text(
                "CREATE VIRTUAL TABLE ref_chunks USING fts5(body, content='', detail='none', "
                "columnsize=0, tokenize='trigram case_sensitive 1')"
            )
        )
        try:
            for whole in (False, True):
                statement = index_rows("search_fields sf", "1", whole)
                conn.execute(text(statement.replace("INTO search_chunks", "INTO ref_chunks", 1)))
            assert _entries(conn, "search_chunks") == _entries(conn, "ref_chunks")
        finally:
            conn.rollback()


def _found(store: Store, term: str) -> set[str]:
    with mock.patch.object(search_ops, "SCAN_RECORDS", 1):
        return {hit.record_id for hit in store.search(owner(), term).hits}


# Field sizes, in chunks, around the whole/long boundary (0: an empty string).
SIZES = st.sampled_from([0, 1, 2, SCAN_CHUNKS - 1, SCAN_CHUNKS, SCAN_CHUNKS + 1, SCAN_CHUNKS + 2])


def _text(chunks: int, term: str | None, where: int, upper: bool, nul: bool) -> str:
    size = chunks * CHUNK_CHARS
    value = ("lorem ipsum " * (size // 12 + 1))[:size]
    if nul and value:
        value = "\x00" + value[1:]
    if term is not None and size >= len(term):
        at = min(where, size - len(term))  # anywhere, also across a chunk boundary
        value = value[:at] + (term.upper() if upper else term) + value[at + len(term) :]
    return value


TEXTS = st.builds(
    _text,
    SIZES,
    st.sampled_from((None, *TERMS)),
    st.integers(min_value=0, max_value=40 * CHUNK_CHARS),
    st.booleans(),
    st.booleans(),
)

STEPS = st.lists(
    st.tuples(st.sampled_from(("upsert", "upsert", "delete")), st.sampled_from("abc"), TEXTS),
    min_size=1,
    max_size=6,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=STEPS)
def test_the_index_stays_exact_through_upserts_and_deletes(
    steps: list[tuple[str, str, str]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    url = f"sqlite:///{tmp_path_factory.mktemp('r3') / 'store.db'}"
    live: dict[str, str] = {}
    with Store.open(url) as store:
        setup_mailbox(store)
        for action, record_id, value in steps:
            if action == "delete":
                if record_id in live:
                    store.delete_record(MAILBOX, STREAM, record_id)
                    del live[record_id]
                continue
            store.upsert_records(MAILBOX, STREAM, [body(record_id, value)])
            live[record_id] = value
            _index_matches_chunks(url)
            for term in TERMS:
                expected = {rid for rid, v in live.items() if term in v.lower() and "\x00" not in v}
                assert _found(store, term) == expected, (term, steps)


def test_deleting_every_chunk_of_a_whole_field_at_once_keeps_the_index_exact(
    sqlite_db_url: str,
) -> None:
    """The triggers' promise (`statements.INDEX_LONG_BASE`, migration 0007): the index follows
    any change of chunks. One DELETE of a whole field's three chunks: the first chunk's trigger
    removes the row and, chunk 0 gone, does not make it again; the next chunks' triggers then
    'delete' rows the index never had (text it was never given)."""
    with Store.open(sqlite_db_url) as store:
        setup_mailbox(store)
        store.upsert_records(MAILBOX, STREAM, [body("a", "x" * (2 * CHUNK_CHARS) + "okapi")])
        store.upsert_records(MAILBOX, STREAM, [body("b", "zebra")])
    _index_matches_chunks(sqlite_db_url)
    with _database(sqlite_db_url) as conn:
        conn.execute(text("DELETE FROM field_chunks WHERE record_id = 'a' AND path = 'body_text'"))
        conn.commit()
    _index_matches_chunks(sqlite_db_url)
