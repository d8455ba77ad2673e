"""The word index (docs/decisions.md, "The word index"): `search_words`, one row per
text-like field and distinct word of its folded scored prefix, with the word's count and the
field's length, and `search_vocabulary`, the distinct words per connection, stream and path.

Ranked search reads a term's postings from them (`_sql.words`) instead of counting every
hit's occurrences in its text. The words that contain a term of 3+ code points are found
through a trigram index of the vocabulary: on SQLite a contentless FTS5 `trigram` table
(`search_vocabulary_trigrams`, rowid = the vocabulary row's), filled by a trigger on each
inserted vocabulary row (so the vocabulary is a rowid table there); on Postgres a `pg_trgm`
GIN index on the word (`ix_search_vocabulary_trigram`).

The writes keep both tables (and SQLite's trigram table, by its trigger) in the write's
transaction; this backfills them from the stored chunks with the current core
(`_core.words.field_words`, docs/decisions.md "A backfill computes with the current core").

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

BATCH_ROWS = 5000
TEXT_LIKE = "('text', 'json')"
SCORED_CHUNKS = 4  # relevance.SCORE_CHARS / CHUNK_CHARS

SQLITE_TRIGRAMS = """
    CREATE VIRTUAL TABLE search_vocabulary_trigrams USING fts5(
        word, content='', detail='none', columnsize=0, tokenize='trigram case_sensitive 1'
    )
"""
SQLITE_TRIGRAMS_BACKFILL = """
    INSERT INTO search_vocabulary_trigrams (rowid, word)
    SELECT rowid, word FROM search_vocabulary
"""
SQLITE_TRIGRAMS_TRIGGER = """
    CREATE TRIGGER search_vocabulary_trigrams_insert AFTER INSERT ON search_vocabulary
    BEGIN
        INSERT INTO search_vocabulary_trigrams (rowid, word) VALUES (new.rowid, new.word);
    END
"""
POSTGRES_TRIGRAMS = """
    CREATE INDEX ix_search_vocabulary_trigram ON search_vocabulary
    USING gin (word gin_trgm_ops)
"""


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def _fields(bind: Any) -> Iterator[tuple[tuple[str, str, str, str, int], str]]:
    """(field key and length, its scored prefix's text) of every text-like field."""
    query = sa.text(
        "SELECT f.connection_id, f.stream, f.record_id, f.path, f.size_chars, fc.text"
        " FROM fields f LEFT JOIN field_chunks fc ON fc.connection_id = f.connection_id"
        " AND fc.stream = f.stream AND fc.record_id = f.record_id AND fc.path = f.path"
        f" AND fc.chunk_no < {SCORED_CHUNKS}"
        f" WHERE f.kind IN {TEXT_LIKE}"
        " ORDER BY f.connection_id, f.stream, f.record_id, f.path, fc.chunk_no"
    ).execution_options(stream_results=True, yield_per=BATCH_ROWS)
    current: tuple[str, str, str, str, int] | None = None
    pieces: list[str] = []
    for connection_id, stream, record_id, path, size, chunk in bind.execute(query):
        key = (connection_id, stream, record_id, path, int(size))
        if key != current:
            if current is not None:
                yield current, "".join(pieces)
            current, pieces = key, []
        if chunk is not None:
            pieces.append(chunk)
    if current is not None:
        yield current, "".join(pieces)


def _backfill(bind: Any) -> None:
    from pdpp_store._core.words import OVERLONG, field_words

    words = sa.text(
        "INSERT INTO search_words"
        " (connection_id, stream, record_id, path, word, occurrences, size_chars)"
        " VALUES (:c, :s, :r, :p, :w, :n, :z)"
    )
    vocabulary = sa.text(
        "INSERT INTO search_vocabulary (connection_id, stream, path, word)"
        " VALUES (:c, :s, :p, :w) ON CONFLICT DO NOTHING"
    )
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str, str]] = set()
    for (connection_id, stream, record_id, path, size), text in _fields(bind):
        for word, count in field_words(text).items():
            rows.append(
                {
                    "c": connection_id,
                    "s": stream,
                    "r": record_id,
                    "p": path,
                    "w": word,
                    "n": count,
                    "z": size,
                }
            )
            if word != OVERLONG:
                seen.add((connection_id, stream, path, word))
        if len(rows) >= BATCH_ROWS:
            bind.execute(words, rows)
            rows = []
    if rows:
        bind.execute(words, rows)
    ordered = sorted(seen)
    for start in range(0, len(ordered), BATCH_ROWS):
        bind.execute(
            vocabulary,
            [
                {"c": c, "s": s, "p": p, "w": w}
                for c, s, p, w in ordered[start : start + BATCH_ROWS]
            ],
        )


def upgrade() -> None:
    op.create_table(
        "search_words",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("record_id", _key(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("word", _key(), nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("size_chars", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("connection_id", "stream", "record_id", "path", "word"),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "search_vocabulary",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("word", _key(), nullable=False),
        sa.PrimaryKeyConstraint("connection_id", "stream", "path", "word"),
    )
    bind = op.get_bind()
    _backfill(bind)
    if bind.dialect.name == "postgresql":
        op.execute(POSTGRES_TRIGRAMS)
    else:  # filled once from the backfill, then by each inserted row
        for statement in (SQLITE_TRIGRAMS, SQLITE_TRIGRAMS_BACKFILL, SQLITE_TRIGRAMS_TRIGGER):
            op.execute(statement)
    op.create_index(
        "ix_search_words_word",
        "search_words",
        ["stream", "path", "word", "connection_id", "record_id", "occurrences", "size_chars"],
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_search_vocabulary_trigram")
    else:
        op.execute("DROP TRIGGER IF EXISTS search_vocabulary_trigrams_insert")
        op.execute("DROP TABLE IF EXISTS search_vocabulary_trigrams")
    op.drop_index("ix_search_words_word", table_name="search_words")
    op.drop_table("search_vocabulary")
    op.drop_table("search_words")
