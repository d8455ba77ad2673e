"""What each change changed: `change_log`, so that a grant's changes walk depends only on what
the grant can see.

- `change_log` (`pdpp_store._sql.tables` Rule 10): per change value of a connection, one row
  with `path` '' when the record's existence changed (insert, delete, a deleted record written
  again) and one row per field path an update rewrote, added or removed; `live_before` (the
  record was live before the change) and `time_before` (the field's instant before it). Keyed
  by `(connection_id, stream, change_seq, path)`, change order; `ix_change_log_record` finds one
  record's later changes.
- `ix_records_changes` is dropped: changes pages walk `change_log` now, and no read orders
  records by `change_seq` (the column stays: the record's last change).

The backfill gives each stored record the row a fresh ingest of its current state writes: an
insert (`live_before` false) at its change value, or, for a deleted record, a delete
(`live_before` true) at the value its delete took. What changed before the migration is
unknowable, so earlier values say nothing more: a walk from a bookmark taken before it reports
a record changed after the bookmark whatever its change touched (as before the migration), and
every later change is told apart field by field. One connection at a time, in one statement
each: no statement reaches across connections (the schema stays distributable).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "change_log",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("change_seq", sa.BigInteger(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("record_id", _key(), nullable=False),
        sa.Column("live_before", sa.Boolean(), nullable=False),
        sa.Column("time_before", _key(), nullable=True),
        sa.PrimaryKeyConstraint("connection_id", "stream", "change_seq", "path"),
    )
    bind = op.get_bind()
    backfill = sa.text(
        "INSERT INTO change_log"
        " (connection_id, stream, change_seq, path, record_id, live_before, time_before)"
        " SELECT connection_id, stream, change_seq, '', record_id, deleted, NULL"
        " FROM records WHERE connection_id = :c"
    )
    for (connection_id,) in bind.execute(sa.text("SELECT connection_id FROM connections")).all():
        bind.execute(backfill, {"c": connection_id})
    op.create_index(
        "ix_change_log_record",
        "change_log",
        ["connection_id", "stream", "record_id", "change_seq", "path"],
    )
    op.drop_index("ix_records_changes", table_name="records")


def downgrade() -> None:
    op.create_index("ix_records_changes", "records", ["connection_id", "stream", "change_seq"])
    op.drop_table("change_log")
