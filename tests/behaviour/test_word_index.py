"""The word index (`search_words`, `search_word_lists`, `search_vocabulary`; docs/decisions.md
"The word index"):
kept by every write in its transaction, equal to the words of every stored text-like field's
scored prefix (`_core.words.field_words` of its stored text), through inserts, updates (a
field changed, one removed, one no longer text-like, a long one rewritten: rows deleted by
their words, computed again from the stored prefix), deletes (soft: the rows stay, as the
fields do) and a record brought back; migration 0015 backfills exactly what the writer wrote,
and 0017 keeps it while it puts the rows in word order, one structure read by its key alone.
On Postgres the rows go in by a copy (`requests.DriverCopy`) in the write's own transaction, on
both fronts: the same rows, committed and rolled back with the batch."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from _data import SqlLog, run_alembic
from _fronts import FRONTS, Front, open_front
from _values import STREAM, VALUES_MANIFEST, _rows
from sqlalchemy import create_engine, inspect

from pdpp_store import AsyncStore, Store
from pdpp_store._core import words
from pdpp_store._core.errors import BadRequest, StoreError
from pdpp_store._runtime import run_async, run_sync, sync_url
from pdpp_store._sql import writes as write_sql
from pdpp_store._sql.index import fts_query, like_pattern
from pdpp_store._sql.requests import Op
from pdpp_store._sql.tables import WORD_KEY

WordRow = tuple[str, str, str, str, str, int, int]


def _word_rows(url: str) -> set[WordRow]:
    rows = _rows(
        url,
        "SELECT connection_id, stream, record_id, path, word, occurrences, size_chars"
        " FROM search_words",
    )
    found = {(c, s, r, p, w, int(n), int(z)) for c, s, r, p, w, n, z in rows}
    assert len(found) == len(rows)
    return found


def _vocabulary(url: str) -> set[tuple[str, str, str, str]]:
    rows = _rows(url, "SELECT connection_id, stream, path, word FROM search_vocabulary")
    return {(c, s, p, w) for c, s, p, w in rows}


def _word_lists(url: str) -> dict[tuple[str, str, str, str], list[str]]:
    """Each field's word list (`search_word_lists`), its words sorted."""
    rows = _rows(url, "SELECT connection_id, stream, record_id, path, words FROM search_word_lists")
    return {(c, s, r, p): sorted(words.split(" ")) for c, s, r, p, words in rows}


def _lists_of(rows: set[WordRow]) -> dict[tuple[str, str, str, str], list[str]]:
    """The word lists the rows call for: per field with rows, the words of its rows."""
    lists: dict[tuple[str, str, str, str], list[str]] = {}
    for c, s, r, p, w, *_ in rows:
        lists.setdefault((c, s, r, p), []).append(w)
    return {key: sorted(found) for key, found in lists.items()}


def _expected(url: str) -> set[WordRow]:
    """The words of every stored text-like field, from its stored chunks."""
    rows = _rows(
        url,
        "SELECT f.connection_id, f.stream, f.record_id, f.path, f.size_chars, fc.chunk_no, fc.text"
        " FROM fields f JOIN field_chunks fc ON fc.connection_id = f.connection_id"
        " AND fc.stream = f.stream AND fc.record_id = f.record_id AND fc.path = f.path"
        " WHERE f.kind IN ('text', 'json')",
    )
    texts: dict[tuple[str, str, str, str, int], dict[int, str]] = {}
    for c, s, r, p, z, n, text in rows:
        texts.setdefault((c, s, r, p, int(z)), {})[int(n)] = text
    expected: set[WordRow] = set()
    for (c, s, r, p, z), chunks in texts.items():
        text = "".join(chunks[n] for n in sorted(chunks))
        expected |= {(c, s, r, p, w, n, z) for w, n in words.field_words(text).items()}
    return expected


LONG = "x" * (words.MAX_WORD_CHARS + 5)
FIRST: list[dict[str, Any]] = [
    {"id": "a", "title": "Hello hello World_1 wörld", "tags": ["Tag one", "tag"]},
    {"id": "b", "title": f"{LONG} short Σigma", "doc": {"k": "Nested words"}},
    {"id": "c", "title": "y " * 2047 + "abcd efg", "anything": "plain"},
    {"id": "d", "title": "", "raw": "QUJD" * 40},
]
GONE = {"id": "e", "title": f"{LONG} gone", "doc": {"k": "Nested words"}, "n": 1}
REWRITTEN = {"id": "e", "title": "no\x00longer text", "n": 2}  # binary now, `doc` removed


def _write(url: str, front: Front = "sync") -> None:
    store = open_front(front, url, batch_size=2)
    try:
        store.register_manifest(VALUES_MANIFEST)
        for connection_id in ("w1", "w2"):
            store.add_connection(connection_id, VALUES_MANIFEST["connector_id"])
        store.upsert_records("w1", STREAM, FIRST)
        store.upsert_records("w2", STREAM, FIRST[:2])
        store.upsert_records("w1", STREAM, [{"id": "a", "title": "Changed words"}])
        store.delete_record("w1", STREAM, "b")
        store.delete_record("w1", STREAM, "c")
        store.upsert_records("w1", STREAM, [FIRST[2]])
        store.upsert_records("w2", STREAM, [FIRST[2], GONE])
        store.upsert_records(  # a long field rewritten; text-like fields gone or turned binary
            "w2", STREAM, [{"id": "c", "title": "z " * 3000, "anything": 5}, REWRITTEN]
        )
    finally:
        store.close()


def test_every_write_keeps_the_word_index(db_url: str) -> None:
    _write(db_url)
    stored = _word_rows(db_url)
    assert stored == _expected(db_url)
    assert _word_lists(db_url) == _lists_of(stored)
    assert _word_lists(db_url)[("w2", STREAM, "b", "title")] == ["", "short", "\u03c3igma"]
    titles = {(c, r, w): n for c, _, r, p, w, n, _ in stored if p == "title"}
    assert titles[("w1", "a", "changed")] == 1
    assert ("w1", "a", "hello") not in titles  # the old value's rows went with it
    assert titles[("w2", "a", "hello")] == 2
    assert titles[("w2", "b", words.OVERLONG)] == 1
    assert titles[("w1", "b", "short")] == 1  # a soft delete keeps the rows (and the fields)
    assert titles[("w1", "c", "y")] == 2047
    assert titles[("w1", "c", "ab")] == 1  # cut at the prefix's end: "ab" of "abcd"
    assert not any(r == "a" and p == "tags" for c, _, r, p, *_ in stored if c == "w1")
    rewritten = {(p, w): n for c, _, r, p, w, n, _ in stored if (c, r) == ("w2", "c")}
    assert rewritten == {("id", "c"): 1, ("title", "z"): 2048, ("anything", "5"): 1}
    assert {(p, w) for c, _, r, p, w, *_ in stored if (c, r) == ("w2", "e")} == {
        ("id", "e"),
        ("n", "2"),
    }
    vocabulary = _vocabulary(db_url)
    held = {(c, s, p, w) for c, s, _, p, w, *_ in stored if w != words.OVERLONG}
    assert held <= vocabulary
    assert ("w1", STREAM, "title", "hello") in vocabulary  # never deleted: no postings left
    assert not any(w == words.OVERLONG for *_, w in vocabulary)


def test_the_word_index_migration_backfills_what_the_writer_wrote(db_url: str) -> None:
    _write(db_url)
    written, vocabulary = _word_rows(db_url), _vocabulary(db_url)
    run_alembic(db_url, "downgrade", "0014")
    engine = create_engine(sync_url(db_url))
    try:
        tables = set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
    assert not tables & {"search_words", "search_vocabulary"}
    run_alembic(db_url, "upgrade", "head")
    assert _word_rows(db_url) == written
    backfilled = _vocabulary(db_url)
    assert backfilled == {(c, s, p, w) for c, s, _, p, w, *_ in written if w != words.OVERLONG}
    assert backfilled <= vocabulary
    assert Counter(w for *_, w in backfilled)["hello"] == 1  # w2's only


def _containing(url: str, term: str) -> set[tuple[str, str, str, str]]:
    """The vocabulary rows the trigram index names for `term` (migration 0015), re-checked."""
    if url.startswith("sqlite"):
        sql = (
            "SELECT connection_id, stream, path, word FROM search_vocabulary WHERE rowid IN"
            " (SELECT rowid FROM search_vocabulary_trigrams"
            " WHERE search_vocabulary_trigrams MATCH ?)"
        )
        rows = _rows(url, sql, (fts_query(term),))
    else:
        sql = (
            "SELECT connection_id, stream, path, word FROM search_vocabulary"
            " WHERE word LIKE ? ESCAPE '\\'"
        )
        rows = _rows(url, sql, (like_pattern(term),))
    return {(c, s, p, w) for c, s, p, w in rows if term in w}


def _terms(vocabulary: set[tuple[str, str, str, str]]) -> set[str]:
    """Terms of 3+ code points: whole words, their first, middle and last trigrams, and some
    with `_` (a `LIKE` metacharacter) or found nowhere."""
    terms = {"d_1", "ld_", "_1x", "zzz", "\u03c3ig", "\u00f6rl"}
    for *_, word in vocabulary:
        if len(word) >= 3:
            terms |= {word, word[:3], word[1:4], word[-3:], word[:4]}
    return {term for term in terms if len(term) >= 3}


def test_the_vocabulary_trigram_index_names_every_word_that_holds_a_term(db_url: str) -> None:
    """Written (SQLite: a trigger per inserted vocabulary row, none for a word already there)
    and backfilled by the migration, the index names every vocabulary row whose word holds a
    term: the words the ranking weighs (`_sql.words` Rule 8)."""
    _write(db_url)
    for _ in range(2):
        vocabulary = _vocabulary(db_url)
        assert ("w2", STREAM, "title", "world_1") in vocabulary
        for term in sorted(_terms(vocabulary)):
            expected = {row for row in vocabulary if term in row[3]}
            assert _containing(db_url, term) == expected, term
        run_alembic(db_url, "downgrade", "0014")
        run_alembic(db_url, "upgrade", "head")


RECORD_ORDER = ["connection_id", "stream", "record_id", "path", "word"]
"""The key before migration 0017 (with `ix_search_words_word` in word order beside it)."""


def _shape(url: str) -> tuple[list[str], list[str]]:
    """`search_words`' key columns, in order, and its other indexes."""
    engine = create_engine(sync_url(url))
    try:
        inspector = inspect(engine)
        key = inspector.get_pk_constraint("search_words")["constrained_columns"]
        return key, sorted(str(index["name"]) for index in inspector.get_indexes("search_words"))
    finally:
        engine.dispose()


def _postings_plan(url: str) -> str:
    """How the database reads a word's postings, every column the ranking needs (Postgres with
    the scans that read the heap turned off: with a few rows it would rather scan)."""
    engine = create_engine(sync_url(url))
    query = (
        "SELECT connection_id, record_id, occurrences, size_chars FROM search_words"
        " WHERE stream = 'items' AND path = 'title' AND word = 'hello'"
    )
    try:
        with engine.connect() as conn:
            if conn.dialect.name == "sqlite":
                rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {query}").all()
                return " ".join(str(row[-1]) for row in rows)
            conn.exec_driver_sql("SET enable_seqscan = off")
            conn.exec_driver_sql("SET enable_bitmapscan = off")
            return " ".join(str(row[0]) for row in conn.exec_driver_sql(f"EXPLAIN {query}"))
    finally:
        engine.dispose()


def test_the_word_index_is_one_structure_read_by_its_key_alone(db_url: str) -> None:
    """One B-tree in word order holds every column a word's postings are read for (`tables`
    Rule 12): no second index, and the lookup by `(stream, path, word)` never reads a heap."""
    _write(db_url)
    assert _shape(db_url) == (list(WORD_KEY), [])
    plan = _postings_plan(db_url)
    if db_url.startswith("sqlite"):
        assert "USING PRIMARY KEY (stream=? AND path=? AND word=?)" in plan, plan
    else:
        assert "Index Only Scan using search_words_pkey" in plan, plan


def test_migration_0017_puts_the_rows_in_word_order_and_keeps_them(db_url: str) -> None:
    """0017 on a store written before it keeps every row; its downgrade brings back the
    record-order key and the word-order index, with the same rows; the writer then keeps the
    rows exact on the converted store (a rewrite deletes the old words by their keys)."""
    _write(db_url)
    written, lists = _word_rows(db_url), _word_lists(db_url)
    run_alembic(db_url, "downgrade", "0016")
    assert _shape(db_url) == (RECORD_ORDER, ["ix_search_words_word"])
    assert _word_rows(db_url) == written
    run_alembic(db_url, "upgrade", "head")
    assert _shape(db_url) == (list(WORD_KEY), [])
    assert _word_rows(db_url) == written
    assert _word_lists(db_url) == lists  # filled from the rows as the writer wrote them
    plan = _postings_plan(db_url)
    assert "PRIMARY KEY" in plan or "search_words_pkey" in plan, plan
    with Store.open(db_url) as store:
        store.upsert_records("w2", STREAM, [{"id": "a", "title": "after"}, FIRST[2]])
    after = _word_rows(db_url)
    assert after == _expected(db_url)
    assert ("w2", STREAM, "a", "title", "after", 1, 5) in after
    assert not any(r == "a" and w == "hello" for c, _, r, _, w, *_ in after if c == "w2")


# ---------------------------------------------------------------- how the rows go in


def test_the_async_front_keeps_the_word_index_as_the_sync_one(db_url: str) -> None:
    """The same writes through `AsyncStore` (Postgres: the copy on psycopg's async connection)
    leave exactly the rows and lists the stored fields call for."""
    _write(db_url, "async")
    stored = _word_rows(db_url)
    assert stored == _expected(db_url)
    assert _word_lists(db_url) == _lists_of(stored)
    titles = {(c, r, w): n for c, _, r, p, w, n, _ in stored if p == "title"}
    assert titles[("w1", "a", "changed")] == 1
    assert titles[("w1", "c", "y")] == 2047


@contextmanager
def _refusing_word_list(url: str, record_id: str) -> Iterator[None]:
    """A trigger that refuses `record_id`'s word lists while the block runs: its batch fails
    after its word rows went in (the lists follow them, `_ops.writes` Rule 7), a fault of the
    database itself. Dropped after (a pooled Postgres database must come back as it was)."""
    sqlite = url.startswith("sqlite")
    if sqlite:
        create = [
            "CREATE TRIGGER refuse_list BEFORE INSERT ON search_word_lists"
            f" WHEN NEW.record_id = '{record_id}' BEGIN SELECT RAISE(ABORT, 'no'); END"
        ]
        drop = ["DROP TRIGGER refuse_list"]
    else:
        create = [
            "CREATE FUNCTION refuse_list() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
            f" IF NEW.record_id = '{record_id}' THEN RAISE EXCEPTION 'no'; END IF;"
            " RETURN NEW; END $$",
            "CREATE TRIGGER refuse_list BEFORE INSERT ON search_word_lists"
            " FOR EACH ROW EXECUTE FUNCTION refuse_list()",
        ]
        drop = ["DROP TRIGGER refuse_list ON search_word_lists", "DROP FUNCTION refuse_list()"]
    engine = create_engine(sync_url(url))
    try:
        with engine.begin() as conn:
            for sql in create:
                conn.exec_driver_sql(sql)
        try:
            yield
        finally:
            with engine.begin() as conn:
                for sql in drop:
                    conn.exec_driver_sql(sql)
    finally:
        engine.dispose()


@pytest.mark.parametrize("front", FRONTS)
def test_a_batch_refused_after_its_word_rows_leaves_none_of_them(db_url: str, front: Front) -> None:
    """The word rows go in within their batch's transaction: a batch the database refuses after
    they went in leaves none of them (nor anything else of it), the batch before it stays."""
    store = open_front(front, db_url, batch_size=2)
    try:
        store.register_manifest(VALUES_MANIFEST)
        store.add_connection("w1", VALUES_MANIFEST["connector_id"])
        store.upsert_records("w1", STREAM, FIRST[:2])
        with _refusing_word_list(db_url, "c"), pytest.raises(StoreError) as refused:
            store.upsert_records("w1", STREAM, FIRST[2:])
        assert refused.value.code == "storage_error"
        store.upsert_records("w1", STREAM, [FIRST[3]])  # the same connection, healthy
    finally:
        store.close()
    stored = _word_rows(db_url)
    assert {r for _, _, r, *_ in stored} == {"a", "b", "d"}
    assert stored == _expected(db_url)
    assert _word_lists(db_url) == _lists_of(stored)


ONE_FIELD: list[write_sql.FieldWords] = [("r1", "title", 11, {"hello": 2, "x": 1})]


def _words_first(fail: bool) -> Op[None]:
    """An operation whose first statement is a batch's word rows (a copy on Postgres), then
    refused by the store itself or ended."""
    yield write_sql.insert_words("w1", STREAM, ONE_FIELD)
    if fail:
        raise BadRequest("invalid_request", "refused after the word rows")


@pytest.mark.parametrize("front", FRONTS)
def test_word_rows_first_in_a_write_commit_and_roll_back_with_it(db_url: str, front: Front) -> None:
    """A copy sends nothing through the engine's connection, which begins its transaction at
    its first statement: the runtime begins it before the copy, so rows copied first of all
    are committed at the operation's end and rolled back when it fails."""
    if front == "sync":
        with Store.open(db_url) as store:
            with pytest.raises(BadRequest):
                run_sync(store.engine, _words_first(fail=True), write=True)
            assert _word_rows(db_url) == set()
            run_sync(store.engine, _words_first(fail=False), write=True)
    else:

        async def write() -> None:
            async with await AsyncStore.open(db_url) as store:
                with pytest.raises(BadRequest):
                    await run_async(store.engine, _words_first(fail=True), write=True)
                assert _word_rows(db_url) == set()
                await run_async(store.engine, _words_first(fail=False), write=True)

        asyncio.run(write())
    assert _word_rows(db_url) == {
        ("w1", STREAM, "r1", "title", "hello", 2, 11),
        ("w1", STREAM, "r1", "title", "x", 1, 11),
    }


@pytest.mark.postgres
def test_postgres_copies_a_batch_s_word_rows_and_lists(
    pg_db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On Postgres a batch's word rows and word lists go in by one copy each
    (`requests.DriverCopy`), not by statements through the engine, and each copy is logged as a
    read is (`pdpp_store.sql`)."""
    with Store.open(pg_db_url) as store:
        store.register_manifest(VALUES_MANIFEST)
        store.add_connection("w1", VALUES_MANIFEST["connector_id"])
        with SqlLog(store) as log, caplog.at_level(logging.INFO, logger="pdpp_store.sql"):
            store.upsert_records("w1", STREAM, FIRST)
    for table in ("search_words", "search_word_lists"):
        inserts = [sql for sql in log.touching(table) if sql.lstrip().startswith("INSERT")]
        assert inserts == [], table
        copies = [r.getMessage() for r in caplog.records if f"COPY {table} " in r.getMessage()]
        assert len(copies) == 1, copies
    stored = _word_rows(pg_db_url)
    assert stored == _expected(pg_db_url)
    assert _word_lists(pg_db_url) == _lists_of(stored)
