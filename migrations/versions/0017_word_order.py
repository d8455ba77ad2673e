"""The word index in one structure, in word order (docs/decisions.md, "The word index"):
`search_words` keyed `(stream, path, word, connection_id, record_id)`, with no second index,
and `search_word_lists`, the words of each field's rows, by which they are deleted.

Before, each row went into two B-trees: the key in record order (`connection_id, stream,
record_id, path, word`), which deleted a field's rows, and `ix_search_words_word` in word
order, which the ranking reads (on Postgres a heap besides). Now the key is in word order and
holds every column the ranking reads: on SQLite the `WITHOUT ROWID` table is rebuilt under the
new key (its rows copied in key order); on Postgres the key's index is made again with the
counts `INCLUDE`d, and the heap stays. A field's rows are deleted by the words of its list
(`pdpp_store._sql.tables` Rule 12), one row per field, filled here from the rows one
connection at a time (no statement reaches across connections). The rows are kept as they
are: the words do not change.

Revision ID: 0017
Revises: 0016
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

COLUMNS = ("connection_id", "stream", "record_id", "path", "word", "occurrences", "size_chars")
WORD_KEY = ("stream", "path", "word", "connection_id", "record_id")
RECORD_KEY = ("connection_id", "stream", "record_id", "path", "word")
COUNTS = ("occurrences", "size_chars")
WORD_INDEX = "ix_search_words_word"


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def _rebuild_sqlite(key: tuple[str, ...]) -> None:
    """SQLite cannot change a table's key: a new table under `key`, filled in key order."""
    op.create_table(
        "search_words_keyed",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("record_id", _key(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("word", _key(), nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("size_chars", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(*key),
        sqlite_with_rowid=False,
    )
    columns = ", ".join(COLUMNS)
    op.execute(
        f"INSERT INTO search_words_keyed ({columns}) SELECT {columns} FROM search_words"
        f" ORDER BY {', '.join(key)}"
    )
    op.drop_table("search_words")  # its index with it
    op.rename_table("search_words_keyed", "search_words")


def _lists(bind: sa.engine.Connection) -> None:
    """`search_word_lists` from the rows, one connection at a time."""
    op.create_table(
        "search_word_lists",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("record_id", _key(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("words", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("connection_id", "stream", "record_id", "path"),
    )
    joined = (
        "string_agg(word, ' ')" if bind.dialect.name == "postgresql" else "group_concat(word, ' ')"
    )
    backfill = sa.text(
        "INSERT INTO search_word_lists (connection_id, stream, record_id, path, words)"
        f" SELECT connection_id, stream, record_id, path, {joined} FROM search_words"
        " WHERE connection_id = :c GROUP BY connection_id, stream, record_id, path"
    )
    for (connection_id,) in bind.execute(sa.text("SELECT connection_id FROM connections")).all():
        bind.execute(backfill, {"c": connection_id})


def upgrade() -> None:
    _lists(op.get_bind())
    if op.get_bind().dialect.name == "postgresql":
        op.drop_index(WORD_INDEX, table_name="search_words")
        op.drop_constraint("search_words_pkey", "search_words", type_="primary")
        op.execute(
            f"ALTER TABLE search_words ADD PRIMARY KEY ({', '.join(WORD_KEY)})"
            f" INCLUDE ({', '.join(COUNTS)})"
        )
    else:
        _rebuild_sqlite(WORD_KEY)


def downgrade() -> None:
    op.drop_table("search_word_lists")
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("search_words_pkey", "search_words", type_="primary")
        op.create_primary_key("search_words_pkey", "search_words", list(RECORD_KEY))
    else:
        _rebuild_sqlite(RECORD_KEY)
    op.create_index(WORD_INDEX, "search_words", [*WORD_KEY, *COUNTS])
