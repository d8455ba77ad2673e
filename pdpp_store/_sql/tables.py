"""The tables (SQLAlchemy Core metadata). See docs/architecture.md for why this layout.

Rules:
1. Every table holding record data carries `connection_id` and leads its primary key with it,
   so the schema can be distributed by connection (Citus) without redesign. One exception:
   `search_words` is keyed in word order (Rule 12), its key holding `connection_id` after the
   word, which is what Citus asks of a distributed table's keys (the key includes the
   distribution column); every statement still ties it to the others by connection.
2. The field is the unit of storage and of authorisation: `fields` holds one row of metadata per
   top-level key, `field_chunks` its text in fixed-size code-point chunks. A read of field X
   touches X's rows only.
3. Everything a read needs to answer without scanning is stored at write time: kind, JSON type,
   size in code points and bytes, digest, item count, the normalised instant (for time
   constraints), blob id and MIME type.
4. Blobs are content-addressed and shared; their bytes live in fixed-size chunks so a byte range
   is read without the rest.
5. Key columns compare byte-wise on every database (`dialects.key_text`: the "C" collation on
   Postgres), so both give the same answers.
6. This file and migrations/ must agree; a test compares them on both databases.
7. The search index is not in this metadata: it is per dialect and cannot be spelt in it (an
   FTS5 virtual table with its shadow tables, a side table and triggers on SQLite; a `pg_trgm`
   GIN expression index on Postgres). Migration 0005 creates it; `SEARCH_INDEX_OBJECTS` names
   its objects so the schema comparison knows them, and a test checks they exist. The SQLite
   side table `search_fields` holds record keys: its unique key leads with `connection_id`
   (Rule 1); its integer primary key exists only to name chunks in the FTS5 rowid.
8. `field_values` holds what a filter compares (`_core.filters.comparable_rows`, written by the
   same write that writes the field): one row per comparable form of a live record's field,
   `element` 0 for the field's own scalar value and 1, 2, ... for an array's comparable
   elements (`has`). `kind` is the form's JSON kind (`null`, `boolean`, `number`, `string`);
   `text` the folded string as `filters.stored_text` gives it (`true`/`false` for a boolean,
   NULL for null and numbers), `num` the
   exact number (NUMERIC: never rounded through a double), `instant` the normalised instant of a
   string that is a date or date-time. Its indexes lead with `connection_id` and the field: the
   equality of any non-number kind (`kind`, `text`), numbers (`num`, `record_id`) and instants
   (`instant`, `record_id`), the last two shaped for ranges and keyset order; and a field's
   own values (`element`, then every column a group key reads: `kind`, `text`, `num`,
   `instant`), so an aggregate grouping by the field reads the index alone (migration 0013);
   and a field's own instants (`instant`, of the rows `element = 0` with an instant only: a
   partial index), so a count by time bucket is one index range per bucket (migration 0014).
   `records` is indexed by `(connection_id, stream, deleted)`: a stream's live records are
   counted from that index alone (migration 0014).
9. Every change of a record (insert, update, delete) takes the next value of its connection's
   change sequence: `change_counters.last_change_seq` is raised in the write's transaction (the
   row lock orders concurrent writers on Postgres, `BEGIN IMMEDIATE` on SQLite) and the record
   keeps it in `records.change_seq`. The counter is a record-data table keyed by
   `connection_id` (Rule 1), not a column of the catalogue's `connections`: every write raises
   it, and a distributed database would otherwise write a reference table, on every node, in
   every write.
10. `change_log` says what each change changed, for changes pages that depend only on what a
   grant can see (docs/decisions.md, "What a changes walk reports"): per change value, one row
   with `path` '' when the record's existence changed (insert, delete, a deleted record written
   again), and one row per field path an update rewrote, added or removed. `live_before` says
   whether the record was live before the change, `time_before` the field's instant before it
   (`fields.time_value` of the row it replaced; NULL for an existence row or a field that had
   none), so a grant's time window can tell when the record entered or left it. Keyed by
   `(connection_id, stream, change_seq, path)`, which is change order; indexed by record, then
   change value, for the look-ups of one record's later changes (a range on the change value
   within one record: with the path before it, SQLite searched the whole connection's later
   changes by the key instead).
11. `value_counts` holds, per connection, stream, field and own value, the number of live
   records whose field has that value: exactly `count(*)` of the `field_values` rows with
   `element` 0 and a `kind` other than `null`, grouped by `(connection_id, stream, path, kind,
   text, num)`, the rows a count by group reads (`_sql.aggregates` Rule 5). The key's columns
   are NOT NULL, so the key is unique on both databases: `text` is '' for a number and `num` 0
   for a string or boolean (the kind says which one is the value). Every write changes it in
   its own transaction with the rows it writes and removes (`_sql.values` Rule 5); a key whose
   count reaches 0 is removed in the same transaction (`ix_value_counts_spent`, a partial index
   of the rows at 0, finds them). Migration 0016.
12. The word index (migration 0015; `_core.words`, docs/decisions.md "The word index"):
   `search_words` holds one row per text-like field and distinct word of its folded scored
   prefix (`relevance.SCORE_CHARS` code points), with the word's count and the field's whole
   length, written and deleted with the field in the same transaction. It is one structure in
   word order (migration 0017): its key is `WORD_KEY`, `(stream, path, word, connection_id,
   record_id)`, and holds every column the ranking reads (SQLite: a `WITHOUT ROWID` table, the
   key's B-tree is the table; Postgres: the key's index `INCLUDE`s the counts), so a word's
   postings are read from the key alone, and each row is written into one B-tree (on
   Postgres, the heap and one B-tree). No structure is in record order: a field's rows are
   deleted by their full keys, its words read from `search_word_lists`, one row per field that
   has word rows, keyed in record order (Rule 1), whose `words` are the words of its rows
   (`OVERLONG` included) joined by single spaces (no word holds a space), written and deleted
   with them. (Computing the words again from the stored text instead was cheaper to keep, but
   deleted nothing of rows whose text had changed outside the writes, and then the field's new
   rows met them.)
   `search_vocabulary` holds each distinct word per
   `(connection_id, stream, path)`, inserted (never deleted: a word no longer held has no
   postings, and every read of postings is under the grant's visibility), for the words
   that contain a term, which are found through a trigram index of the words (SQLite: the
   contentless FTS5 table `search_vocabulary_trigrams`, named by the vocabulary's rowid and
   filled by a trigger on insert; Postgres: the `pg_trgm` GIN index
   `ix_search_vocabulary_trigram`; both in `SEARCH_INDEX_OBJECTS`). On SQLite the vocabulary
   keeps a rowid, the trigram table's name for its rows.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    text,
)

from .dialects import key_text

__all__ = [
    "BLOB_CHUNK_BYTES",
    "EXISTENCE",
    "SEARCH_INDEX_OBJECTS",
    "WORD_KEY",
    "blob_chunks",
    "blobs",
    "change_counters",
    "change_log",
    "connections",
    "cursor_keys",
    "field_chunks",
    "field_values",
    "fields",
    "grants",
    "manifests",
    "metadata",
    "read_audit",
    "records",
    "search_vocabulary",
    "search_word_lists",
    "search_words",
    "streams",
    "value_counts",
]

BLOB_CHUNK_BYTES = 64 * 1024

SEARCH_INDEX_OBJECTS = {
    "sqlite": frozenset(
        {
            "search_fields",
            "search_chunks",
            "search_chunks_data",
            "search_chunks_idx",
            "search_chunks_config",
            "search_chunks_delete",
            "search_chunks_update",
            "search_vocabulary_trigrams",
            "search_vocabulary_trigrams_data",
            "search_vocabulary_trigrams_idx",
            "search_vocabulary_trigrams_config",
            "search_vocabulary_trigrams_insert",
        }
    ),
    "postgresql": frozenset({"ix_field_chunks_trigram", "ix_search_vocabulary_trigram"}),
}
"""The search index's objects per dialect (Rule 7): tables, triggers and indexes."""


def record_key() -> list[Column[str]]:
    """The columns that name a record, leading every record-data table's key (Rule 1)."""
    return [
        Column("connection_id", key_text(), nullable=False),
        Column("stream", key_text(), nullable=False),
        Column("record_id", key_text(), nullable=False),
    ]


metadata = MetaData()

cursor_keys = Table(
    "cursor_keys",
    metadata,
    Column("key_id", SmallInteger, primary_key=True, autoincrement=False),
    Column("secret", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

grants = Table(
    "grants",
    metadata,
    Column("grant_id", key_text(), primary_key=True),
    Column("terms", Text, nullable=False),
    Column("created_at", Text, nullable=False),
    Column("expires_at", Text, nullable=True),
    Column("revoked_at", Text, nullable=True),
)
"""Grants the owner keeps in the store (migration 0009): terms as `Grant.to_dict` writes them,
never changed once stored; instants as fixed-width UTC text (`normalize_instant`)."""

read_audit = Table(
    "read_audit",
    metadata,
    Column(
        "audit_id",
        BigInteger().with_variant(Integer(), "sqlite"),
        primary_key=True,
        autoincrement=True,
    ),
    Column("at", Text, nullable=False),
    Column("request_id", Text, nullable=True),
    Column("grant_id", Text, nullable=True),
    Column("client", Text, nullable=True),
    Column("surface", Text, nullable=False),
    Column("operation", Text, nullable=False),
    Column("stream", Text, nullable=True),
    Column("connection_id", Text, nullable=True),
    Column("record_ids", Text, nullable=False),
    Column("record_count", Integer, nullable=False),
    Column("fields", Text, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("terms", Text, nullable=False),
    Index("ix_read_audit_at", "at"),
    Index("ix_read_audit_grant_at", "grant_id", "at"),
)
"""The read audit (migration 0011): one row per answered read under a grant (`_ops.audit`),
written in batches; `record_ids`, `fields` and `terms` are JSON text; never a field value. The
owner's log, not record data: it is never joined with a record table (on Citus, a table of the
coordinator)."""

streams = Table(
    "streams",
    metadata,
    Column("connector_id", key_text(), nullable=False),
    Column("stream", key_text(), nullable=False),
    Column("primary_key", Text, nullable=False),
    Column("consent_time_field", Text),
    Column("hints", Text, nullable=False),
    PrimaryKeyConstraint("connector_id", "stream"),
)

manifests = Table(
    "manifests",
    metadata,
    Column("connector_id", key_text(), primary_key=True),
    Column("document", Text, nullable=False),
    Column("registered_at", DateTime(timezone=True), nullable=False),
)

connections = Table(
    "connections",
    metadata,
    Column("connection_id", key_text(), primary_key=True),
    Column("connector_id", key_text(), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

change_counters = Table(
    "change_counters",
    metadata,
    Column("connection_id", key_text(), primary_key=True),
    Column("last_change_seq", BigInteger, nullable=False),
)

records = Table(
    "records",
    metadata,
    *record_key(),
    Column("version", Integer, nullable=False),
    Column("digest", Text, nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("change_seq", BigInteger, nullable=False, server_default=text("0")),
    PrimaryKeyConstraint("connection_id", "stream", "record_id"),
    Index("ix_records_live", "connection_id", "stream", "deleted"),
)

EXISTENCE = ""
"""`change_log.path` of a change of the record's existence (no field path is empty)."""

change_log = Table(
    "change_log",
    metadata,
    Column("connection_id", key_text(), nullable=False),
    Column("stream", key_text(), nullable=False),
    Column("change_seq", BigInteger, nullable=False),
    Column("path", key_text(), nullable=False),
    Column("record_id", key_text(), nullable=False),
    Column("live_before", Boolean, nullable=False),
    Column("time_before", key_text()),
    PrimaryKeyConstraint("connection_id", "stream", "change_seq", "path"),
    Index("ix_change_log_record", "connection_id", "stream", "record_id", "change_seq", "path"),
)

fields = Table(
    "fields",
    metadata,
    *record_key(),
    Column("path", key_text(), nullable=False),
    Column("kind", Text, nullable=False),
    Column("json_type", Text, nullable=False),
    Column("size_chars", BigInteger, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("digest", Text, nullable=False),
    Column("item_count", Integer),
    Column("mime_type", Text),
    Column("blob_id", key_text()),
    Column("time_value", key_text()),
    PrimaryKeyConstraint("connection_id", "stream", "record_id", "path"),
    Index("ix_fields_blob", "connection_id", "blob_id"),
    Index("ix_fields_blob_id", "blob_id"),
)

field_chunks = Table(
    "field_chunks",
    metadata,
    *record_key(),
    Column("path", key_text(), nullable=False),
    Column("chunk_no", Integer, nullable=False),
    Column("text", key_text(), nullable=False),
    Column("folded", key_text()),
    Column("lookahead", key_text()),
    PrimaryKeyConstraint("connection_id", "stream", "record_id", "path", "chunk_no"),
)

OWN_INSTANTS = "element = 0 AND instant IS NOT NULL"
"""The rows of `ix_field_values_own_instants` (Rule 8): a field's own value that is an instant."""

field_values = Table(
    "field_values",
    metadata,
    *record_key(),
    Column("path", key_text(), nullable=False),
    Column("element", Integer, nullable=False),
    Column("kind", key_text(), nullable=False),
    Column("text", key_text()),
    Column("num", Numeric),
    Column("instant", key_text()),
    PrimaryKeyConstraint("connection_id", "stream", "record_id", "path", "element"),
    Index("ix_field_values_text", "connection_id", "stream", "path", "kind", "text"),
    Index("ix_field_values_num", "connection_id", "stream", "path", "num", "record_id"),
    Index("ix_field_values_instant", "connection_id", "stream", "path", "instant", "record_id"),
    Index(
        "ix_field_values_groups",
        *("connection_id", "stream", "path", "element", "kind", "text", "num", "instant"),
    ),
    Index(
        "ix_field_values_own_instants",
        *("connection_id", "stream", "path", "instant"),
        sqlite_where=text(OWN_INSTANTS),
        postgresql_where=text(OWN_INSTANTS),
    ),
)

SPENT_COUNTS = "records = 0"

value_counts = Table(
    "value_counts",
    metadata,
    Column("connection_id", key_text(), nullable=False),
    Column("stream", key_text(), nullable=False),
    Column("path", key_text(), nullable=False),
    Column("kind", key_text(), nullable=False),
    Column("text", key_text(), nullable=False),
    Column("num", Numeric, nullable=False),
    Column("records", BigInteger, nullable=False),
    PrimaryKeyConstraint("connection_id", "stream", "path", "kind", "text", "num"),
    Index(
        "ix_value_counts_spent",
        "connection_id",
        sqlite_where=text(SPENT_COUNTS),
        postgresql_where=text(SPENT_COUNTS),
    ),
)

WORD_KEY = ("stream", "path", "word", "connection_id", "record_id")
"""The key of `search_words`, in word order (Rules 1 and 12)."""

search_words = Table(
    "search_words",
    metadata,
    *record_key(),
    Column("path", key_text(), nullable=False),
    Column("word", key_text(), nullable=False),
    Column("occurrences", Integer, nullable=False),
    Column("size_chars", BigInteger, nullable=False),
    # One structure in word order (Rule 12): SQLite's table is its key; Postgres's key holds
    # the rest of the row, so a word's postings are read from the key alone.
    PrimaryKeyConstraint(*WORD_KEY, postgresql_include=["occurrences", "size_chars"]),
    sqlite_with_rowid=False,
)

search_word_lists = Table(
    "search_word_lists",
    metadata,
    *record_key(),
    Column("path", key_text(), nullable=False),
    Column("words", Text, nullable=False),
    PrimaryKeyConstraint("connection_id", "stream", "record_id", "path"),
)

search_vocabulary = Table(
    "search_vocabulary",
    metadata,
    Column("connection_id", key_text(), nullable=False),
    Column("stream", key_text(), nullable=False),
    Column("path", key_text(), nullable=False),
    Column("word", key_text(), nullable=False),
    PrimaryKeyConstraint("connection_id", "stream", "path", "word"),
)

blobs = Table(
    "blobs",
    metadata,
    Column("blob_id", key_text(), primary_key=True),
    Column("sha256", Text, nullable=False),
    Column("mime_type", Text, nullable=False),
    Column("size_bytes", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

blob_chunks = Table(
    "blob_chunks",
    metadata,
    Column("blob_id", key_text(), nullable=False),
    Column("chunk_no", Integer, nullable=False),
    Column("data", LargeBinary, nullable=False),
    PrimaryKeyConstraint("blob_id", "chunk_no"),
)
