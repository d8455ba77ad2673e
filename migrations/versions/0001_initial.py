"""The initial layout: manifests, connections, records, fields, field chunks, blobs, cursor keys.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def _record_key() -> list[sa.Column[str]]:
    return [
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("record_id", _key(), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "cursor_keys",
        sa.Column("key_id", sa.SmallInteger(), primary_key=True, autoincrement=False),
        sa.Column("secret", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "manifests",
        sa.Column("connector_id", _key(), primary_key=True),
        sa.Column("document", sa.Text(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "streams",
        sa.Column("connector_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("primary_key", sa.Text(), nullable=False),
        sa.Column("consent_time_field", sa.Text()),
        sa.Column("hints", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("connector_id", "stream"),
    )
    op.create_table(
        "connections",
        sa.Column("connection_id", _key(), primary_key=True),
        sa.Column("connector_id", _key(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "records",
        *_record_key(),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("deleted", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("connection_id", "stream", "record_id"),
    )
    op.create_table(
        "fields",
        *_record_key(),
        sa.Column("path", _key(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("json_type", sa.Text(), nullable=False),
        sa.Column("size_chars", sa.BigInteger(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("digest", sa.Text(), nullable=False),
        sa.Column("chunk_count", sa.Integer(), nullable=False),
        sa.Column("item_count", sa.Integer()),
        sa.Column("mime_type", sa.Text()),
        sa.Column("blob_id", _key()),
        sa.Column("time_value", _key()),
        sa.PrimaryKeyConstraint("connection_id", "stream", "record_id", "path"),
    )
    op.create_index("ix_fields_blob", "fields", ["connection_id", "blob_id"])
    op.create_table(
        "field_chunks",
        *_record_key(),
        sa.Column("path", _key(), nullable=False),
        sa.Column("chunk_no", sa.Integer(), nullable=False),
        sa.Column("text", _key(), nullable=False),
        sa.Column("folded", _key()),
        sa.PrimaryKeyConstraint("connection_id", "stream", "record_id", "path", "chunk_no"),
    )
    op.create_table(
        "blobs",
        sa.Column("blob_id", _key(), primary_key=True),
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("mime_type", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "blob_chunks",
        sa.Column("blob_id", _key(), nullable=False),
        sa.Column("chunk_no", sa.Integer(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("blob_id", "chunk_no"),
    )
    if op.get_bind().dialect.name == "postgresql":
        # A chunk row (up to 1024 code points of text plus its folded form) stays inline and
        # uncompressed up to a page, so a window read never detoasts or decompresses.
        op.execute("ALTER TABLE field_chunks SET (toast_tuple_target = 8160)")
        # Blob bytes are mostly compressed already (PDF, images): store them out of line without
        # recompression, so substring() of a range fetches only the TOAST chunks it needs.
        op.execute("ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL")


def downgrade() -> None:
    for table in (
        "blob_chunks",
        "blobs",
        "field_chunks",
        "fields",
        "records",
        "connections",
        "streams",
        "manifests",
        "cursor_keys",
    ):
        op.drop_table(table)
