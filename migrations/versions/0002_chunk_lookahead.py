"""Each text chunk keeps the folded start of the next chunk, so short needles that cross a chunk
boundary are found without reading the neighbouring row; and fields are indexed by blob id.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

LOOKAHEAD_CHARS = 63  # as pdpp_store._core.values.LOOKAHEAD_CHARS when this revision was written


def upgrade() -> None:
    # Blob visibility under a grant without instance_ids looks fields up by blob id alone.
    op.create_index("ix_fields_blob_id", "fields", ["blob_id"])
    key = sa.Text().with_variant(sa.Text(collation="C"), "postgresql")
    with op.batch_alter_table("field_chunks") as batch:
        batch.add_column(sa.Column("lookahead", key))
    # Existing text-like chunks: the next chunk's folded text (or its text, where folding changes
    # nothing), cut to the look-ahead. Binary-only fields' chunks never carry one.
    op.execute(
        sa.text(
            """
            UPDATE field_chunks SET lookahead = (
                SELECT substr(coalesce(nxt.folded, nxt.text), 1, :n)
                FROM field_chunks AS nxt
                WHERE nxt.connection_id = field_chunks.connection_id
                  AND nxt.stream = field_chunks.stream
                  AND nxt.record_id = field_chunks.record_id
                  AND nxt.path = field_chunks.path
                  AND nxt.chunk_no = field_chunks.chunk_no + 1
            )
            WHERE EXISTS (
                SELECT 1 FROM fields
                WHERE fields.connection_id = field_chunks.connection_id
                  AND fields.stream = field_chunks.stream
                  AND fields.record_id = field_chunks.record_id
                  AND fields.path = field_chunks.path
                  AND fields.kind IN ('text', 'json')
            )
            """
        ).bindparams(n=LOOKAHEAD_CHARS)
    )


def downgrade() -> None:
    with op.batch_alter_table("field_chunks") as batch:
        batch.drop_column("lookahead")
    op.drop_index("ix_fields_blob_id", "fields")
