"""SQLite's search index holds a field of at most 32 chunks as ONE row, named by its id.

Before, every chunk of an indexed field was a row named `search_id * 2**22 + chunk_no`: an
email-sized record made five or six rows whose rowids lay 2**22 apart, so every entry of the
index (a trigram's list of rowids, stored as deltas) took four bytes or more, and every batch's
segment was merged again, level after level, with all of them. Now (`statements.INDEX_LONG_BASE`):

- a field of at most `SCAN_CHUNKS` (32) chunks, "whole" in `search_fields.whole`, is one row,
  rowid = its `search_id` (dense: deltas of a byte or two). Its text is its chunks' indexed texts
  (folded text plus look-ahead), each between two separators, so the row's trigrams do not depend
  on the order the chunks come in. Search asks the index for records, and a match scan reads the
  first 32 chunks of a field itself, so nothing needs to know which chunk of such a field holds
  a term;
- a longer field keeps a row per chunk, named `-2**62 + search_id * 2**22 + chunk_no`
  (negative: apart from the whole rows), for a match scan's late chunks.

Measured on 1,000,000 email-sized records (CHANGELOG.md, session 5; decisions.md, "The search
index"): the index is a fifth of its size, and a batch's cost no longer grows with the records
present.

The writes remove a whole field's row before deleting its chunks; the triggers keep the index in
step with any other change of chunks (a whole field's row is deleted as it was and made again of
the chunks left). Upgrade and downgrade rebuild the index from the chunks (minutes on a database
of millions of records). Postgres's index is unchanged.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

SCAN_CHUNKS = 32
SHIFT = 4194304  # 2**22 chunks per long field
LONG_BASE = -(2**62)
AUTOMERGE = 8
TEXT_LIKE = "('text', 'json')"
SEP = "char(31, 31)"
PIECE_FC = "coalesce(fc.folded, fc.text) || coalesce(fc.lookahead, '')"
PIECE_OLD = "coalesce(old.folded, old.text) || coalesce(old.lookahead, '')"
PIECE_NEW = "coalesce(new.folded, new.text) || coalesce(new.lookahead, '')"
FC_OF_SF = (
    "fc.connection_id = sf.connection_id AND fc.stream = sf.stream "
    "AND fc.record_id = sf.record_id AND fc.path = sf.path"
)
HAS_TEXT = f"EXISTS (SELECT 1 FROM field_chunks fc WHERE {FC_OF_SF})"
"""The field has a chunk left: its whole row exists exactly then (after a delete of chunks by
hand, in any order, the row is remade of the chunks left; none left, none made)."""
WHOLE_TEXT = (
    f"(SELECT {SEP} || group_concat({PIECE_FC}, {SEP}) || {SEP} "
    f"FROM field_chunks fc WHERE {FC_OF_SF})"
)


def _same(alias: str, row: str) -> str:
    return " AND ".join(
        f"{alias}.{column} = {row}.{column}"
        for column in ("connection_id", "stream", "record_id", "path")
    )


def _indexed(row: str) -> str:
    return f"EXISTS (SELECT 1 FROM fields f WHERE {_same('f', row)} AND f.kind IN {TEXT_LIKE})"


def _others(row: str) -> str:
    """The indexed texts of the field's chunks other than `row`'s, joined (NULL if none)."""
    return (
        f"(SELECT group_concat({PIECE_FC}, {SEP}) FROM field_chunks fc "
        f"WHERE {_same('fc', row)} AND fc.chunk_no <> {row}.chunk_no)"
    )


def _was(piece: str, row: str) -> str:
    """The whole row's text with `piece` as `row`'s chunk and the other chunks as they are."""
    return f"{SEP} || {piece} || {SEP} || coalesce({_others(row)} || {SEP}, '')"


FTS = """
    CREATE VIRTUAL TABLE search_chunks USING fts5(
        body, content='', detail='none', columnsize=0, tokenize='trigram case_sensitive 1'
    )
"""

UNINDEX_OLD = f"""
        INSERT INTO search_chunks (search_chunks, rowid, body)
        SELECT 'delete', {LONG_BASE} + sf.search_id * {SHIFT} + old.chunk_no, {PIECE_OLD}
        FROM search_fields sf WHERE {_same("sf", "old")} AND sf.whole = 0;
        INSERT INTO search_chunks (search_chunks, rowid, body)
        SELECT 'delete', sf.search_id, {_was(PIECE_OLD, "old")}
        FROM search_fields sf WHERE {_same("sf", "old")} AND sf.whole = 1;"""
"""Both triggers: take the old chunk out (its long row, or its field's whole row as it was)."""
REINDEX_WHOLE = f"""
        INSERT INTO search_chunks (rowid, body)
        SELECT sf.search_id, {WHOLE_TEXT}
        FROM search_fields sf WHERE {_same("sf", "old")} AND sf.whole = 1 AND {HAS_TEXT};"""
"""Both triggers: make the whole row again of the chunks there are now."""

TRIGGERS = [
    f"""
    CREATE TRIGGER search_chunks_delete AFTER DELETE ON field_chunks
    WHEN {_indexed("old")}
    BEGIN{UNINDEX_OLD}{REINDEX_WHOLE}
    END
    """,
    f"""
    CREATE TRIGGER search_chunks_update AFTER UPDATE OF text, folded, lookahead ON field_chunks
    WHEN {_indexed("new")}
    BEGIN{UNINDEX_OLD}
        INSERT INTO search_chunks (rowid, body)
        SELECT {LONG_BASE} + sf.search_id * {SHIFT} + new.chunk_no, {PIECE_NEW}
        FROM search_fields sf WHERE {_same("sf", "new")} AND sf.whole = 0;{REINDEX_WHOLE}
    END
    """,
]

REBUILD = [
    f"""
    INSERT INTO search_chunks (rowid, body)
    SELECT {LONG_BASE} + sf.search_id * {SHIFT} + fc.chunk_no, {PIECE_FC}
    FROM search_fields sf JOIN field_chunks fc ON {FC_OF_SF}
    WHERE sf.whole = 0 ORDER BY sf.search_id, fc.chunk_no
    """,
    f"""
    INSERT INTO search_chunks (rowid, body)
    SELECT sf.search_id, {WHOLE_TEXT} FROM search_fields sf
    WHERE sf.whole = 1 AND {HAS_TEXT} ORDER BY sf.search_id
    """,
]

# As 0005 made them (and its backfill, with 0006's automerge).
OLD_BODY_NEW = "coalesce(new.folded, new.text) || coalesce(new.lookahead, '')"
OLD_TRIGGERS = [
    f"""
    CREATE TRIGGER search_chunks_delete AFTER DELETE ON field_chunks
    WHEN {_indexed("old")}
    BEGIN
        INSERT INTO search_chunks (search_chunks, rowid, body)
        SELECT 'delete', sf.search_id * {SHIFT} + old.chunk_no, {PIECE_OLD}
        FROM search_fields sf WHERE {_same("sf", "old")};
    END
    """,
    f"""
    CREATE TRIGGER search_chunks_update AFTER UPDATE OF text, folded, lookahead ON field_chunks
    WHEN {_indexed("new")}
    BEGIN
        INSERT INTO search_chunks (search_chunks, rowid, body)
        SELECT 'delete', sf.search_id * {SHIFT} + old.chunk_no, {PIECE_OLD}
        FROM search_fields sf WHERE {_same("sf", "old")};
        INSERT INTO search_chunks (rowid, body)
        SELECT sf.search_id * {SHIFT} + new.chunk_no, {OLD_BODY_NEW}
        FROM search_fields sf WHERE {_same("sf", "new")};
    END
    """,
]
OLD_REBUILD = f"""
    INSERT INTO search_chunks (rowid, body)
    SELECT sf.search_id * {SHIFT} + fc.chunk_no, {PIECE_FC}
    FROM search_fields sf JOIN field_chunks fc ON {FC_OF_SF}
    ORDER BY sf.search_id, fc.chunk_no
"""


def _new_index(rebuild: list[str], triggers: list[str]) -> None:
    for name in ("search_chunks_delete", "search_chunks_update"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TABLE search_chunks")
    op.execute(FTS)
    op.execute(f"INSERT INTO search_chunks (search_chunks, rank) VALUES ('automerge', {AUTOMERGE})")
    for statement in (*rebuild, *triggers):
        op.execute(statement)
    # The rebuild leaves many segments still to merge, which later writes would pay for, a
    # little each (measured at 1,000,000 records: 1.4x the cost of a batch into an empty
    # database, 1.1x after this; it took 33 s there).
    op.execute("INSERT INTO search_chunks (search_chunks) VALUES ('optimize')")


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("ALTER TABLE search_fields ADD COLUMN whole BOOLEAN NOT NULL DEFAULT 0")
    op.execute(
        "UPDATE search_fields SET whole = NOT EXISTS (SELECT 1 FROM field_chunks fc "
        f"WHERE {_same('fc', 'search_fields')} AND fc.chunk_no = {SCAN_CHUNKS})"
    )
    _new_index(REBUILD, TRIGGERS)


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    _new_index([OLD_REBUILD], OLD_TRIGGERS)
    op.execute("ALTER TABLE search_fields DROP COLUMN whole")
