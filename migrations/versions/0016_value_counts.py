"""Counts per value kept by the write path: `value_counts`, so a count by a field's value reads
one row per value, not one index entry per record.

- `value_counts` (`pdpp_store._sql.tables` Rule 11): per connection, stream, field and own value
  (`kind`, `text`, `num`; `text` '' for a number, `num` 0 for a string or boolean, so the key
  has no NULL and is unique on both databases), the number of live records whose field has
  that value: the `field_values` rows with `element` 0 and a `kind` other than `null`, counted.
  Every write changes it in its own transaction (`pdpp_store._sql.values` Rule 5).
- `ix_value_counts_spent`: the rows at 0 (a partial index), which a write removes before it
  commits, so it is empty between writes.

The backfill counts `field_values` one connection at a time, in one statement each: no
statement reaches across connections (the schema stays distributable).

Revision ID: 0016
Revises: 0015
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

SPENT_COUNTS = "records = 0"


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "value_counts",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("kind", _key(), nullable=False),
        sa.Column("text", _key(), nullable=False),
        sa.Column("num", sa.Numeric(), nullable=False),
        sa.Column("records", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("connection_id", "stream", "path", "kind", "text", "num"),
    )
    bind = op.get_bind()
    backfill = sa.text(
        "INSERT INTO value_counts (connection_id, stream, path, kind, text, num, records)"
        " SELECT connection_id, stream, path, kind, COALESCE(text, ''), COALESCE(num, 0),"
        " count(*) FROM field_values"
        " WHERE connection_id = :c AND element = 0 AND kind <> 'null'"
        " GROUP BY connection_id, stream, path, kind, COALESCE(text, ''), COALESCE(num, 0)"
    )
    for (connection_id,) in bind.execute(sa.text("SELECT connection_id FROM connections")).all():
        bind.execute(backfill, {"c": connection_id})
    op.create_index(
        "ix_value_counts_spent",
        "value_counts",
        ["connection_id"],
        sqlite_where=sa.text(SPENT_COUNTS),
        postgresql_where=sa.text(SPENT_COUNTS),
    )


def downgrade() -> None:
    op.drop_index("ix_value_counts_spent", table_name="value_counts")
    op.drop_table("value_counts")
