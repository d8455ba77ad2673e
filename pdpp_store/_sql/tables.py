"""The tables (SQLAlchemy Core metadata). See docs/architecture.md for why this layout.

Rules:
1. Every table holding record data carries `connection_id` and leads its primary key with it,
   so the schema can be distributed by connection (Citus) without redesign.
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
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
)

from .dialects import key_text

__all__ = [
    "BLOB_CHUNK_BYTES",
    "SEARCH_INDEX_OBJECTS",
    "blob_chunks",
    "blobs",
    "connections",
    "cursor_keys",
    "field_chunks",
    "fields",
    "manifests",
    "metadata",
    "records",
    "streams",
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
        }
    ),
    "postgresql": frozenset({"ix_field_chunks_trigram"}),
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

records = Table(
    "records",
    metadata,
    *record_key(),
    Column("version", Integer, nullable=False),
    Column("digest", Text, nullable=False),
    Column("deleted", Boolean, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
    PrimaryKeyConstraint("connection_id", "stream", "record_id"),
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
