"""Aggregates over a field's comparable values alone: `ix_field_values_groups`.

An index of `field_values` leading `(connection_id, stream, path, element)` and holding every
column a group key reads (`kind`, `text`, `num`, `instant`), so a count by group under a grant
whose terms are connection and stream only (`pdpp_store._sql.aggregates` Rule 5) reads one
field's own values (`element` 0) from the index alone, in key order, never the table.

Revision ID: 0013
Revises: 0011
"""

from __future__ import annotations

from alembic import op

revision = "0013"
down_revision = "0011"
branch_labels = None
depends_on = None

COLUMNS = ["connection_id", "stream", "path", "element", "kind", "text", "num", "instant"]


def upgrade() -> None:
    op.create_index("ix_field_values_groups", "field_values", COLUMNS)


def downgrade() -> None:
    op.drop_index("ix_field_values_groups", table_name="field_values")
