"""The search index over each text-like chunk's folded text plus its look-ahead (exactly the
text a match scan searches), used as a candidate filter and always re-checked with
instr/strpos on the text itself.

- SQLite: an FTS5 table with the `trigram` tokenizer, contentless, `detail=none`
  (`search_chunks`), whose rowid names the chunk: `search_id * 2**22 + chunk_no`, where
  `search_fields` gives each indexed field a stable integer id (its unique key leads with
  `connection_id`, like every record table's). The store's writes index the chunks they insert
  in their own transaction (measured 4x faster than an insert trigger); triggers on
  `field_chunks` remove the entries of chunks deleted or updated, so no write can leave the
  index out of step.
- Postgres: `pg_trgm` and a GIN index on the same expression (`ix_field_chunks_trigram`),
  maintained by Postgres itself. `CREATE EXTENSION pg_trgm` needs a superuser, or (Postgres
  13+, where pg_trgm is trusted) a user with CREATE on the database.

Both are built here from the existing chunks (the backfill).

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

ROWID_SHIFT = 4194304  # 2**22 chunks per field: 4 G code points
TEXT_LIKE = "('text', 'json')"
BODY_NEW = "coalesce(new.folded, new.text) || coalesce(new.lookahead, '')"
BODY_OLD = "coalesce(old.folded, old.text) || coalesce(old.lookahead, '')"


def _same(alias: str, row: str) -> str:
    return " AND ".join(
        f"{alias}.{column} = {row}.{column}"
        for column in ("connection_id", "stream", "record_id", "path")
    )


def _indexed(row: str) -> str:
    """The chunk `row` belongs to a text-like field (only those are indexed)."""
    return f"EXISTS (SELECT 1 FROM fields f WHERE {_same('f', row)} AND f.kind IN {TEXT_LIKE})"


SQLITE_OBJECTS = [
    """
    CREATE TABLE search_fields (
        search_id INTEGER PRIMARY KEY,
        connection_id TEXT NOT NULL,
        stream TEXT NOT NULL,
        record_id TEXT NOT NULL,
        path TEXT NOT NULL,
        UNIQUE (connection_id, stream, record_id, path)
    )
    """,
    """
    CREATE VIRTUAL TABLE search_chunks USING fts5(
        body, content='', detail='none', columnsize=0, tokenize='trigram case_sensitive 1'
    )
    """,
    f"""
    CREATE TRIGGER search_chunks_delete AFTER DELETE ON field_chunks
    WHEN {_indexed("old")}
    BEGIN
        INSERT INTO search_chunks (search_chunks, rowid, body)
        SELECT 'delete', sf.search_id * {ROWID_SHIFT} + old.chunk_no, {BODY_OLD}
        FROM search_fields sf WHERE {_same("sf", "old")};
    END
    """,
    f"""
    CREATE TRIGGER search_chunks_update AFTER UPDATE OF text, folded, lookahead ON field_chunks
    WHEN {_indexed("new")}
    BEGIN
        INSERT INTO search_chunks (search_chunks, rowid, body)
        SELECT 'delete', sf.search_id * {ROWID_SHIFT} + old.chunk_no, {BODY_OLD}
        FROM search_fields sf WHERE {_same("sf", "old")};
        INSERT INTO search_chunks (rowid, body)
        SELECT sf.search_id * {ROWID_SHIFT} + new.chunk_no, {BODY_NEW}
        FROM search_fields sf WHERE {_same("sf", "new")};
    END
    """,
]

SQLITE_BACKFILL = [
    f"""
    INSERT INTO search_fields (connection_id, stream, record_id, path)
    SELECT connection_id, stream, record_id, path FROM fields WHERE kind IN {TEXT_LIKE}
    ORDER BY connection_id, stream, record_id, path
    """,
    f"""
    INSERT INTO search_chunks (rowid, body)
    SELECT sf.search_id * {ROWID_SHIFT} + fc.chunk_no,
           coalesce(fc.folded, fc.text) || coalesce(fc.lookahead, '')
    FROM search_fields sf JOIN field_chunks fc ON {_same("fc", "sf")}
    """,
]

POSTGRES_INDEX = """
    CREATE INDEX ix_field_chunks_trigram ON field_chunks
    USING gin ((coalesce(folded, text) || coalesce(lookahead, '')) gin_trgm_ops)
"""


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
        op.execute(POSTGRES_INDEX)
        return
    for statement in (*SQLITE_OBJECTS, *SQLITE_BACKFILL):
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_field_chunks_trigram")
        return
    for name in ("search_chunks_delete", "search_chunks_update"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TABLE IF EXISTS search_chunks")
    op.execute("DROP TABLE IF EXISTS search_fields")
