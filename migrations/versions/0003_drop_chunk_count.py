"""Drop `fields.chunk_count`: written on every field, never read (a window's chunks follow from
its offsets, and a field's size is `size_chars`).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("fields") as batch:
        batch.drop_column("chunk_count")


def downgrade() -> None:
    # The count is derived again from the chunks themselves (none for an empty value).
    with op.batch_alter_table("fields") as batch:
        batch.add_column(sa.Column("chunk_count", sa.Integer(), nullable=False, server_default="0"))
    op.execute(
        sa.text(
            """
            UPDATE fields SET chunk_count = (
                SELECT count(*) FROM field_chunks
                WHERE field_chunks.connection_id = fields.connection_id
                  AND field_chunks.stream = fields.stream
                  AND field_chunks.record_id = fields.record_id
                  AND field_chunks.path = fields.path
            )
            """
        )
    )
    with op.batch_alter_table("fields") as batch:
        batch.alter_column("chunk_count", server_default=None)
