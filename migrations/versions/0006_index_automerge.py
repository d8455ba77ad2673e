"""SQLite's search index merges its segments eight at a time instead of FTS5's default four.

Each write adds a segment to `search_chunks` (one per transaction: a batch); FTS5 merges
segments of a level once `automerge` of them are there, so every indexed trigram is rewritten
once per level, and the levels grow with the logarithm of the index's size: with the default
of 4, the index's share of a batch of email-sized records grew from about a tenth at an empty
database to a third with 200,000 records present. At 8 a trigram is rewritten two thirds as
often; a query reads at most seven segments per level instead of three, on fewer levels.
(Measured in session 4: CHANGELOG.md; the decision: decisions.md, "The search index".)
Postgres's index is unchanged.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

AUTOMERGE = 8
FTS5_DEFAULT_AUTOMERGE = 4


def _set_automerge(value: int) -> None:
    op.execute(
        f"INSERT INTO search_chunks (search_chunks, rank) VALUES ('automerge', {int(value)})"
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _set_automerge(AUTOMERGE)


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _set_automerge(FTS5_DEFAULT_AUTOMERGE)
