"""Folded text re-derived under the corrected fold (pdpp-simple-fold-v2).

Fold v2 changes three code points: U+0130 'İ' now folds to 'i' (so "istanbul" finds "İstanbul");
U+1FD3 and U+1FE3 fold like U+0390 and U+03B0. Only chunks holding one of them change: their
folded text, and the look-ahead of the chunk before them, are recomputed with the store's fold,
so stored chunks and folded needles agree again. (The search index of issue 13 is not part of
this revision: see docs/decisions.md.)

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

LOOKAHEAD_CHARS = 63  # as pdpp_store._core.values when this revision was written
REFOLDED = ("\u0130", "\u1fd3", "\u1fe3")
"""The code points whose fold changed from pdpp-simple-fold-v1 to v2."""


def upgrade() -> None:
    from pdpp_store._core.folding import fold  # the fold the store writes with

    bind = op.get_bind()
    position = "strpos" if bind.dialect.name == "postgresql" else "instr"
    found = " OR ".join(f"{position}(fc.text, :c{n}) > 0" for n in range(len(REFOLDED)))
    text_like = (
        "EXISTS (SELECT 1 FROM fields f WHERE f.connection_id = fc.connection_id"
        " AND f.stream = fc.stream AND f.record_id = fc.record_id AND f.path = fc.path"
        " AND f.kind IN ('text', 'json'))"
    )
    rows = bind.execute(
        sa.text(
            "SELECT fc.connection_id, fc.stream, fc.record_id, fc.path, fc.chunk_no, fc.text"
            f" FROM field_chunks fc WHERE ({found}) AND {text_like}"
        ),
        {f"c{n}": char for n, char in enumerate(REFOLDED)},
    ).all()
    key = "connection_id = :c AND stream = :s AND record_id = :r AND path = :p"
    for conn, stream, record, path, chunk_no, text in rows:
        folded = fold(text)
        where = {"c": conn, "s": stream, "r": record, "p": path}
        bind.execute(
            sa.text(f"UPDATE field_chunks SET folded = :f WHERE {key} AND chunk_no = :n"),
            {**where, "n": chunk_no, "f": None if folded == text else folded},
        )
        if chunk_no > 0:
            bind.execute(
                sa.text(f"UPDATE field_chunks SET lookahead = :a WHERE {key} AND chunk_no = :n"),
                {**where, "n": chunk_no - 1, "a": fold(text[:LOOKAHEAD_CHARS])},
            )


def downgrade() -> None:
    """Nothing to undo in the schema; v1 readers would see v2 folds of three code points."""
