"""Test material for what filters compare (`field_values`) and the change sequence: a manifest
declaring every kind of field a filter may ask of, and readers of the stored rows.

The stored rows are read with the driver's own SQL (`exec_driver_sql`), so numbers come back as
the database holds them (Postgres NUMERIC as `Decimal`, SQLite's int or float), never through
SQLAlchemy's type processing; `value_key` turns both, and the oracle's forms, into one exact
`Decimal`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from sqlalchemy import create_engine

from pdpp_store._core.filters import comparable_rows, stored_text
from pdpp_store._core.manifest import Manifest, StreamSpec
from pdpp_store._runtime import sync_url

__all__ = [
    "STREAM",
    "VALUES_MANIFEST",
    "ValueRow",
    "change_seqs",
    "counted_values",
    "expected_values",
    "spec",
    "stored_counts",
    "stored_values",
]

STREAM = "items"
VALUES_MANIFEST: dict[str, Any] = {
    "connector_id": "https://example.com/connectors/values",
    "streams": [
        {
            "name": STREAM,
            "primary_key": ["id"],
            "cursor_field": "when",
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "title": {"type": "string"},
                    "n": {"type": "number"},
                    "flag": {"type": "boolean"},
                    "tags": {"type": "array"},
                    "when": {"type": "string", "format": "date-time"},
                    "maybe": {"type": ["string", "null"]},
                    "anything": {},
                    "doc": {"type": "object"},
                    "raw": {"type": "string", "contentEncoding": "base64"},
                }
            },
            "query": {"range_filters": {"n": ["gt", "lte"], "when": ["gte", "lt"]}},
        }
    ],
}

ValueRow = tuple[str, str, int, str, str | None, Decimal | None, str | None]
"""(record_id, path, element, kind, text, num, instant)."""


def spec() -> StreamSpec:
    found = Manifest.from_dict(VALUES_MANIFEST).spec(STREAM)
    assert found is not None
    return found


def _exact(number: object) -> Decimal | None:
    if number is None:
        return None
    if isinstance(number, Decimal):
        return number
    if isinstance(number, float):
        return Decimal(repr(number))
    assert isinstance(number, int)
    return Decimal(number)


def expected_values(
    records: Mapping[str, Mapping[str, Any]], declared: StreamSpec | None = None
) -> set[ValueRow]:
    """What the write path must have stored for these live records (by record id), under the
    stream's declaration (`VALUES_MANIFEST`'s by default)."""
    rows: set[ValueRow] = set()
    stream = declared or spec()
    for record_id, record in records.items():
        for path in sorted(record):
            element = 0
            for stored in comparable_rows(stream, {path: record[path]}):
                form = stored.form
                element = element + 1 if stored.element else 0
                text: str | None = None
                if form.kind == "string":
                    text = stored_text(str(form.value))
                elif form.kind == "boolean":
                    text = "true" if form.value else "false"
                number = _exact(form.value) if form.kind == "number" else None
                rows.add((record_id, path, element, form.kind, text, number, form.instant))
    return rows


def _rows(url: str, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
    engine = create_engine(sync_url(url))
    try:
        with engine.connect() as conn:
            marker = "%s" if conn.dialect.name == "postgresql" else "?"
            return [
                tuple(row) for row in conn.exec_driver_sql(sql.replace("?", marker), tuple(params))
            ]
    finally:
        engine.dispose()


def stored_values(url: str, connection_id: str) -> set[ValueRow]:
    rows = _rows(
        url,
        "SELECT record_id, path, element, kind, text, num, instant FROM field_values"
        " WHERE connection_id = ?",
        (connection_id,),
    )
    found = {(r, p, int(e), k, t, _exact(n), i) for r, p, e, k, t, n, i in rows}
    assert len(found) == len(rows)
    return found


CountKey = tuple[str, str, str, str, Decimal]


def stored_counts(url: str, connection_id: str) -> dict[CountKey, int]:
    """`value_counts` of a connection: per (stream, path, kind, text, num), its count."""
    rows = _rows(
        url,
        "SELECT stream, path, kind, text, num, records FROM value_counts WHERE connection_id = ?",
        (connection_id,),
    )
    found = {(s, p, k, t, _exact(n)): int(c) for s, p, k, t, n, c in rows}
    assert len(found) == len(rows), "one row per key"
    return found  # type: ignore[return-value]


def counted_values(url: str, connection_id: str) -> dict[CountKey, int]:
    """What `value_counts` must hold: the connection's `field_values` rows of own values
    (`element` 0) other than null, grouped by their key and counted (here, not in SQL)."""
    rows = _rows(
        url,
        "SELECT stream, path, kind, text, num FROM field_values"
        " WHERE connection_id = ? AND element = 0",
        (connection_id,),
    )
    counted: dict[CountKey, int] = {}
    for stream, path, kind, text, num in rows:
        if kind == "null":
            continue
        number = kind == "number"
        value = _exact(num) if number else Decimal(0)
        assert value is not None
        key: CountKey = (stream, path, kind, "" if number else text, value)
        counted[key] = counted.get(key, 0) + 1
    return counted


def change_seqs(url: str, connection_id: str) -> tuple[dict[str, tuple[int, bool]], int]:
    """Per record id its (change_seq, deleted), and the connection's last change value."""
    records = _rows(
        url,
        "SELECT record_id, change_seq, deleted FROM records WHERE connection_id = ?",
        (connection_id,),
    )
    (last,) = _rows(
        url, "SELECT last_change_seq FROM change_counters WHERE connection_id = ?", (connection_id,)
    )
    return {r: (int(seq), bool(deleted)) for r, seq, deleted in records}, int(last[0])
