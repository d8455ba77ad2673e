"""What filters compare and what changes pages walk: `field_values` and a change sequence.

- `field_values`: per live record, one row per comparable form of each declared, text-like
  field (`pdpp_store._core.filters.comparable_rows`: the folded short string and its instant,
  the exact number, the boolean, null, and an array's comparable elements), indexed with
  `connection_id` leading for equality (`kind`, `text`), numbers and instants (ranges and keyset
  order, `record_id` last).
- `change_counters` (one row per connection, keyed by `connection_id` like record data: every
  write raises it) and `records.change_seq`: every insert, update or delete of a record takes
  the next value of its connection's sequence; `ix_records_changes` orders a stream's changes.

The backfill gives existing databases exactly what the writer gives a fresh one. Each record's
change sequence is its rank in its connection by last change (`updated_at`, then stream and
record id: the order a batch writes in). The values are computed with the store's own
`comparable_rows` from the stored text of the fields that can have a comparable form (strings of
at most `MAX_COMPARABLE_CHARS` code points, whatever their kind, JSON scalars and arrays),
under the manifest registered now; a longer string is never read. Numbers go to Postgres'
NUMERIC through their shortest exact text (as the writer's statement does), never rounded
through a double.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

BATCH_ROWS = 1000
VALUE_COLUMNS = (
    "connection_id",
    "stream",
    "record_id",
    "path",
    "element",
    "kind",
    "text",
    "num",
    "instant",
)


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def _number(postgres: bool) -> str:
    # as `pdpp_store._sql.dialects.exact_number`
    return "CAST(CAST(:num AS TEXT) AS NUMERIC)" if postgres else ":num"


def _change_sequences() -> None:
    op.create_table(
        "change_counters",
        sa.Column("connection_id", _key(), primary_key=True),
        sa.Column("last_change_seq", sa.BigInteger(), nullable=False),
    )
    op.add_column(
        "records", sa.Column("change_seq", sa.BigInteger(), nullable=False, server_default="0")
    )
    bind = op.get_bind()
    # One connection at a time, numbered here: no statement reaches across connections or
    # joins records to a derived table of records (the schema stays distributable).
    # The updates run while `ranked` is still being read, on the same connection. That is safe
    # on both databases: SQLite sorts the whole result before returning its first row (no index
    # orders by `updated_at`), and a Postgres cursor reads the snapshot taken when it opened; and
    # `change_seq`, the one column written, is neither selected nor ordered by.
    ranked = sa.text(
        "SELECT stream, record_id FROM records WHERE connection_id = :c"
        " ORDER BY updated_at, stream, record_id"
    ).execution_options(stream_results=True, yield_per=BATCH_ROWS)
    numbered = sa.text(
        "UPDATE records SET change_seq = :seq"
        " WHERE connection_id = :c AND stream = :s AND record_id = :r"
    )
    for (connection_id,) in bind.execute(sa.text("SELECT connection_id FROM connections")).all():
        seq = 0
        batch: list[dict[str, Any]] = []
        for stream, record_id in bind.execute(ranked, {"c": connection_id}):
            seq += 1
            batch.append({"seq": seq, "c": connection_id, "s": stream, "r": record_id})
            if len(batch) == BATCH_ROWS:
                bind.execute(numbered, batch)
                batch = []
        if batch:
            bind.execute(numbered, batch)
        bind.execute(
            sa.text("INSERT INTO change_counters (connection_id, last_change_seq) VALUES (:c, :n)"),
            {"c": connection_id, "n": seq},
        )
    op.create_index("ix_records_changes", "records", ["connection_id", "stream", "change_seq"])


def _stored_values(bind: Any, connection_id: str, stream: str, paths: list[str]) -> Iterator[Any]:
    """(record_id, path, kind, chunk text) of the live fields that may have a comparable form,
    chunks in order (no chunk: an empty string)."""
    from pdpp_store._core.filters import MAX_COMPARABLE_CHARS

    query = sa.text(
        "SELECT f.record_id, f.path, f.kind, fc.text FROM fields f"
        " JOIN records r ON r.connection_id = f.connection_id AND r.stream = f.stream"
        " AND r.record_id = f.record_id"
        " LEFT JOIN field_chunks fc ON fc.connection_id = f.connection_id"
        " AND fc.stream = f.stream AND fc.record_id = f.record_id AND fc.path = f.path"
        " WHERE f.connection_id = :c AND f.stream = :s AND r.deleted = :false"
        " AND f.path IN :paths AND ("
        "  (f.kind IN ('text', 'base64', 'binary') AND f.size_chars <= :short)"
        "  OR (f.kind = 'json' AND f.json_type <> 'object'))"
        " ORDER BY f.record_id, f.path, fc.chunk_no"
    ).bindparams(sa.bindparam("paths", expanding=True))
    result = bind.execute(
        query.execution_options(stream_results=True, yield_per=BATCH_ROWS),
        {
            "c": connection_id,
            "s": stream,
            "false": False,
            "paths": paths,
            "short": MAX_COMPARABLE_CHARS,
        },
    )
    yield from result


def _value_rows(bind: Any, connection_id: str, stream: str, spec: Any) -> Iterator[dict[str, Any]]:
    from pdpp_store._core.filters import comparable_rows

    paths = sorted(name for name, known in spec.declared.items() if known.text_like)
    if not paths:
        return
    current: tuple[str, str, str] | None = None
    pieces: list[str] = []

    def rows_of(record_id: str, path: str, kind: str, text: str) -> Iterator[dict[str, Any]]:
        # JSON and strings holding NUL (`binary`) are stored as JSON text
        value = json.loads(text) if kind in ("json", "binary") else text
        for number, stored in enumerate(comparable_rows(spec, {path: value}), start=1):
            form = stored.form
            yield {
                "connection_id": connection_id,
                "stream": stream,
                "record_id": record_id,
                "path": path,
                "element": number if stored.element else 0,
                "kind": form.kind,
                "text": _text_of(form.kind, form.value),
                "num": form.value if form.kind == "number" else None,
                "instant": form.instant,
            }

    for record_id, path, kind, chunk in _stored_values(bind, connection_id, stream, paths):
        key = (record_id, path, kind)
        if key != current:
            if current is not None:
                yield from rows_of(*current, "".join(pieces))
            current, pieces = key, []
        if chunk is not None:
            pieces.append(chunk)
    if current is not None:
        yield from rows_of(*current, "".join(pieces))


def _text_of(kind: str, value: object) -> str | None:
    from pdpp_store._core.filters import stored_text

    if kind == "string":
        return stored_text(str(value))
    if kind == "boolean":
        return "true" if value else "false"
    return None


def _field_values() -> None:
    from pdpp_store._core.manifest import Manifest

    op.create_table(
        "field_values",
        sa.Column("connection_id", _key(), nullable=False),
        sa.Column("stream", _key(), nullable=False),
        sa.Column("record_id", _key(), nullable=False),
        sa.Column("path", _key(), nullable=False),
        sa.Column("element", sa.Integer(), nullable=False),
        sa.Column("kind", _key(), nullable=False),
        sa.Column("text", _key()),
        sa.Column("num", sa.Numeric()),
        sa.Column("instant", _key()),
        sa.PrimaryKeyConstraint("connection_id", "stream", "record_id", "path", "element"),
    )
    bind = op.get_bind()
    postgres = bind.dialect.name == "postgresql"
    insert = sa.text(
        f"INSERT INTO field_values ({', '.join(VALUE_COLUMNS)}) VALUES ("
        + ", ".join(_number(postgres) if c == "num" else f":{c}" for c in VALUE_COLUMNS)
        + ")"
    )
    connections = bind.execute(
        sa.text(
            "SELECT c.connection_id, m.document FROM connections c"
            " JOIN manifests m ON m.connector_id = c.connector_id ORDER BY c.connection_id"
        )
    ).all()
    for connection_id, document in connections:
        for spec in Manifest.from_json(document).streams:
            batch: list[dict[str, Any]] = []
            for row in _value_rows(bind, connection_id, spec.name, spec):
                batch.append(row)
                if len(batch) == BATCH_ROWS:
                    bind.execute(insert, batch)
                    batch = []
            if batch:
                bind.execute(insert, batch)
    op.create_index(
        "ix_field_values_text",
        "field_values",
        ["connection_id", "stream", "path", "kind", "text"],
    )
    op.create_index(
        "ix_field_values_num",
        "field_values",
        ["connection_id", "stream", "path", "num", "record_id"],
    )
    op.create_index(
        "ix_field_values_instant",
        "field_values",
        ["connection_id", "stream", "path", "instant", "record_id"],
    )


def upgrade() -> None:
    _change_sequences()
    _field_values()


def downgrade() -> None:
    op.drop_table("field_values")
    op.drop_index("ix_records_changes", table_name="records")
    with op.batch_alter_table("records") as batch:
        batch.drop_column("change_seq")
    op.drop_table("change_counters")
