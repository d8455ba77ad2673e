"""Discovery's figures (docs/contract.md §11.3): how many records of a stream a grant can see,
when the newest of them was written, and the oldest and newest values of the stream's order
field among them.

Rules:
1. Every figure is an aggregate computed in SQL over the records the grant can see: each
   statement carries `visibility.visible_records`, looked up when it is built (connection,
   stream, not deleted, `resources`, time constraint), so a hidden or deleted record is never
   counted, never bounds a range and never dates a write; no row is loaded into Python.
2. The records are those of the covered connections that declare the stream (`d_conns`, one
   parameter), so the primary key `(connection_id, stream, ...)` and the order field's
   `field_values` index `(connection_id, stream, path, ...)` lead every scan.
3. The order field's bounds come from `field_values` (the comparable forms the write path
   stores), one connection and one end at a time, walking its value index from that end:
   instants where the field's declared type holds strings, numbers where it holds only
   numbers, as `query_records` orders it; a value with no such form is no bound. Statements
   are asked only for an order field the grant covers (the operation decides).
4. The last write is the newest `updated_at` among the visible records: a delete, or a write of
   a record the grant cannot see, dates nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any

from sqlalchemy import Select, Text, and_, bindparam, cast, func, select

from pdpp_store._core.grants import StreamGrant

from . import visibility
from .requests import Execute, Rows
from .tables import field_values, records
from .visibility import GrantShape, grant_params, in_ids, same_record

__all__ = [
    "StreamFigures",
    "order_bounds",
    "read_bound",
    "read_figures",
    "stream_figures",
]


def _params(grant: StreamGrant, connection_ids: Sequence[str]) -> dict[str, Any]:
    return {**grant_params(grant), "d_conns": sorted(connection_ids)}


def stream_figures(grant: StreamGrant, connection_ids: Sequence[str]) -> Execute:
    """The visible records' count and newest `updated_at` (rules 1, 2 and 4)."""
    return Execute(_stream_figures(GrantShape.of(grant)), _params(grant, connection_ids))


@lru_cache(maxsize=64)
def _stream_figures(shape: GrantShape) -> Select[int, Any]:
    return select(
        func.count().label("record_count"),
        func.max(records.c.updated_at).label("last_written_at"),
    ).where(in_ids(records.c.connection_id, "d_conns"), visibility.visible_records(shape))


class StreamFigures:
    """`stream_figures`' answer."""

    __slots__ = ("last_written_at", "record_count")

    def __init__(self, record_count: int, last_written_at: str | None) -> None:
        self.record_count = record_count
        self.last_written_at = last_written_at


def _instant(value: object) -> str | None:
    """A stored `updated_at` as an ISO-8601 UTC instant (`...Z`): drivers hand back a datetime,
    or (SQLite, below SQLAlchemy) the text it stored; a naive one is UTC."""
    if value is None:
        return None
    stamp = value if isinstance(value, datetime) else datetime.fromisoformat(str(value))
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def read_figures(rows: Rows) -> StreamFigures:
    row = rows[0] if rows else {"record_count": 0, "last_written_at": None}
    return StreamFigures(int(row["record_count"] or 0), _instant(row["last_written_at"]))


def order_bounds(
    grant: StreamGrant, connection_id: str, path: str, *, numeric: bool, newest: bool
) -> Execute:
    """The least (or with `newest` the greatest) comparable value of field `path` among the
    visible records of one connection: its instants, or with `numeric` its numbers (rule 3).
    The value index `(connection_id, stream, path, value)` is walked from that end and the walk
    stops at the first visible record, so a bound costs what finding one visible record costs,
    not a pass over the stream."""
    params = {**grant_params(grant), "d_conn": connection_id, "d_path": path}
    return Execute(_order_bound(GrantShape.of(grant), numeric, newest), params)


@lru_cache(maxsize=256)
def _order_bound(shape: GrantShape, numeric: bool, newest: bool) -> Select[str]:
    column = field_values.c.num if numeric else field_values.c.instant
    # as text: a NUMERIC value has no result type a driver-level read can decode alike
    return (
        select(cast(column, Text).label("bound"))
        .select_from(field_values.join(records, same_record(field_values, records)))
        .where(
            field_values.c.connection_id == bindparam("d_conn"),
            field_values.c.stream == bindparam("g_stream"),
            and_(field_values.c.path == bindparam("d_path"), field_values.c.element == 0),
            column.is_not(None),
            visibility.visible_records(shape),
        )
        .order_by(column.desc() if newest else column.asc())
        .limit(1)
    )


def read_bound(rows: Rows, *, numeric: bool) -> str | int | float | None:
    """`order_bounds`' answer: an instant as stored (`...Z`), a number as int or float."""
    if not rows or rows[0]["bound"] is None:
        return None
    value = rows[0]["bound"]
    return _number(value) if numeric else str(value)


def _number(text: object) -> int | float | None:
    """A number read back as text: an int when integral (`1.0` is `1`), else a float."""
    if text is None:
        return None
    exact = Decimal(str(text))
    return int(exact) if exact == exact.to_integral_value() else float(exact)
