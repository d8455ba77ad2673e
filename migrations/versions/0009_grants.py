"""Grants kept in the store: `grants`, one row per grant the owner added, revocable at once.

- `grant_id` names the grant (a key: compared byte-wise on every database).
- `terms` is the grant's JSON as `Grant.to_dict` writes it: a grant's terms never change once
  stored (a new grant takes a new id), so a server may keep them between requests and only ask
  the store whether the grant still holds.
- `created_at`, `expires_at` and `revoked_at` are fixed-width UTC instants
  (`_core.grants.normalize_instant`), text so that every reader (SQLAlchemy or the bare driver)
  compares and decodes them alike. `expires_at` repeats the terms' expiry so that `list_grants`
  and the per-read check need not parse the terms.

Grants are the owner's catalogue, not record data: no `connection_id` leads the key (a grant
spans connections; a distributed database would keep it as a reference table).

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.create_table(
        "grants",
        sa.Column("grant_id", _key(), primary_key=True),
        sa.Column("terms", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Text(), nullable=True),
        sa.Column("revoked_at", sa.Text(), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("grants")
