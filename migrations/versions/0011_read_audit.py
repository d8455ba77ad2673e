"""The read audit: `read_audit`, one row per answered read under a grant (docs/contract.md §14).

- `audit_id` orders rows as they were written (an identity on Postgres, SQLite's rowid).
- `at` is a fixed-width UTC instant (text, as the grants' instants), indexed for the owner's
  filters by time, and with `grant_id` for the filters by grant.
- `record_ids` (the first 100 served), `fields` and `terms` (what was asked) are JSON text;
  no column holds a field value.

The owner's log, not record data: no key leads with `connection_id` (on Citus it stays a table
of the coordinator; it is never joined with a record table).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "read_audit",
        sa.Column(
            "audit_id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            primary_key=True,
            autoincrement=True,
        ),
        sa.Column("at", sa.Text(), nullable=False),
        sa.Column("request_id", sa.Text(), nullable=True),
        sa.Column("grant_id", sa.Text(), nullable=True),
        sa.Column("client", sa.Text(), nullable=True),
        sa.Column("surface", sa.Text(), nullable=False),
        sa.Column("operation", sa.Text(), nullable=False),
        sa.Column("stream", sa.Text(), nullable=True),
        sa.Column("connection_id", sa.Text(), nullable=True),
        sa.Column("record_ids", sa.Text(), nullable=False),
        sa.Column("record_count", sa.Integer(), nullable=False),
        sa.Column("fields", sa.Text(), nullable=False),
        sa.Column("outcome", sa.Text(), nullable=False),
        sa.Column("terms", sa.Text(), nullable=False),
    )
    op.create_index("ix_read_audit_at", "read_audit", ["at"])
    op.create_index("ix_read_audit_grant_at", "read_audit", ["grant_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_read_audit_grant_at", table_name="read_audit")
    op.drop_index("ix_read_audit_at", table_name="read_audit")
    op.drop_table("read_audit")
