"""The word index (`search_words`, `search_vocabulary`; docs/decisions.md "The word index"):
kept by every write in its transaction, equal to the words of every stored text-like field's
scored prefix (`_core.words.field_words` of its stored text), through inserts, updates (a
field changed, one removed), deletes (soft: the rows stay, as the fields do) and a record
brought back; and migration 0015 backfills exactly what the writer wrote."""

from __future__ import annotations

from collections import Counter
from typing import Any

from _data import run_alembic
from _values import STREAM, VALUES_MANIFEST, _rows
from sqlalchemy import create_engine, inspect

from pdpp_store import Store
from pdpp_store._core import words
from pdpp_store._runtime import sync_url
from pdpp_store._sql.index import fts_query, like_pattern

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


def _write(url: str) -> None:
    with Store.open(url, batch_size=2) as store:
        store.register_manifest(VALUES_MANIFEST)
        for connection_id in ("w1", "w2"):
            store.add_connection(connection_id, VALUES_MANIFEST["connector_id"])
        store.upsert_records("w1", STREAM, FIRST)
        store.upsert_records("w2", STREAM, FIRST[:2])
        store.upsert_records("w1", STREAM, [{"id": "a", "title": "Changed words"}])
        store.delete_record("w1", STREAM, "b")
        store.delete_record("w1", STREAM, "c")
        store.upsert_records("w1", STREAM, [FIRST[2]])


def test_every_write_keeps_the_word_index(db_url: str) -> None:
    _write(db_url)
    stored = _word_rows(db_url)
    assert stored == _expected(db_url)
    titles = {(c, r, w): n for c, _, r, p, w, n, _ in stored if p == "title"}
    assert titles[("w1", "a", "changed")] == 1
    assert ("w1", "a", "hello") not in titles  # the old value's rows went with it
    assert titles[("w2", "a", "hello")] == 2
    assert titles[("w2", "b", words.OVERLONG)] == 1
    assert titles[("w1", "b", "short")] == 1  # a soft delete keeps the rows (and the fields)
    assert titles[("w1", "c", "y")] == 2047
    assert titles[("w1", "c", "ab")] == 1  # cut at the prefix's end: "ab" of "abcd"
    assert not any(r == "a" and p == "tags" for c, _, r, p, *_ in stored if c == "w1")
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
