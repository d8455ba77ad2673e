"""Aggregates counted as index ranges: `ix_records_live` and `ix_field_values_own_instants`.

- `ix_records_live` on `records (connection_id, stream, deleted)`: the number of a stream's
  live records (the visible count beside a count by group, `pdpp_store._sql.aggregates` Rule 5)
  is a range of this index alone, not a read of every row of `records` for its `deleted` flag.
- `ix_field_values_own_instants` on `field_values (connection_id, stream, path, instant)`, of
  the rows `element = 0 AND instant IS NOT NULL` only (a partial index): a field's own instants
  in order, so a count by time bucket is one index range per bucket (Rule 6 of
  `_sql.aggregates`), and the lowest and highest instant are its two ends. Partial, so a write
  pays for it only for a field whose own value is a date or a date-time.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

OWN_INSTANTS = "element = 0 AND instant IS NOT NULL"


def upgrade() -> None:
    op.create_index("ix_records_live", "records", ["connection_id", "stream", "deleted"])
    op.create_index(
        "ix_field_values_own_instants",
        "field_values",
        ["connection_id", "stream", "path", "instant"],
        sqlite_where=sa.text(OWN_INSTANTS),
        postgresql_where=sa.text(OWN_INSTANTS),
    )


def downgrade() -> None:
    op.drop_index("ix_field_values_own_instants", table_name="field_values")
    op.drop_index("ix_records_live", table_name="records")
