"""`query_records` statements (docs/contract.md §11.2): a page of a stream's visible records in
order, their count, a page of changes, and the projected fields of a page's records.

Rules:
1. Every statement carries the stream grant's visibility condition
   (`visibility.visible_records`) on `records`, so a hidden record gives no row at all; a changes
   page takes the same condition without its `deleted` term (`with_deleted`), a deleted record
   giving a tombstone exactly where it would be visible were it not deleted.
2. A filter is `filters.filter_condition`, beside the visibility condition, on the same rows.
3. A page in field order joins each record's order value: the `field_values` row (element 0) of
   the order field, its `instant` where the order field holds date-times (`OrderKind`
   `instant`), else its `num`; a record without one sorts after every record with one. Rows go
   in the page's direction by (value, connection_id, record_id), keyset pages strictly after
   the cursor's tuple: a page never skips or repeats a record while the data does not change.
4. A page in key order is the same without the value. A changes page goes by
   (connection_id, change_seq) ascending, strictly after the bookmark's position per
   connection (a connection the bookmark does not name: from the beginning).
5. The projected fields are read only for the page's keys and only for the granted paths chosen
   in Python before the statement is built; text-like values come as their first
   `preview_chars` code points (one chunk at most).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Integer,
    and_,
    bindparam,
    func,
    literal_column,
    not_,
    or_,
    select,
    tuple_,
)

from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .dialects import exact_numeric
from .filters import filter_condition
from .reads import FIELD_META, field_info
from .requests import Execute, Rows
from .tables import change_counters, field_chunks, field_values, fields, records
from .visibility import grant_terms, in_ids, kind_in, same_record

__all__ = [
    "ChangeRow",
    "OrderKind",
    "PageRow",
    "change_rows",
    "changes_page",
    "counter_tops",
    "match_count",
    "page_rows",
    "record_count",
    "records_page",
    "row_fields",
    "row_previews",
    "tops",
]

OrderKind = Literal["instant", "number"]
Direction = Literal["asc", "desc"]
OrderValue = str | int | float | None
PageKey = tuple[OrderValue, str, str]
"""A position in a page's order: (order value or None, connection_id, record_id)."""


def _scope(
    grant: StreamGrant, connection_id: str | None
) -> tuple[ColumnElement[bool], dict[str, Any]]:
    shape, terms = grant_terms(grant)
    condition = visibility.visible_records(shape)
    if connection_id is not None:
        condition = and_(condition, records.c.connection_id == connection_id)
    return condition, dict(terms)


def _order_value(kind: OrderKind) -> ColumnElement[Any]:
    return field_values.c.instant if kind == "instant" else field_values.c.num


def _value(value: OrderValue, kind: OrderKind) -> Any:
    return exact_numeric(value) if kind == "number" and value is not None else value  # type: ignore[arg-type]


def _after(
    key_columns: Sequence[ColumnElement[Any]], values: Sequence[Any], direction: Direction
) -> ColumnElement[bool]:
    """The rows strictly after `values` in `direction` over `key_columns` (lexicographic)."""
    options: list[ColumnElement[bool]] = []
    for depth in range(len(key_columns)):
        equal = [
            column == value for column, value in zip(key_columns[:depth], values, strict=False)
        ]
        column, value = key_columns[depth], values[depth]
        beyond = column < value if direction == "desc" else column > value
        options.append(and_(*equal, beyond))
    return or_(*options)


def records_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    order_field: str | None,
    order_kind: OrderKind,
    direction: Direction,
    after: PageKey | None,
    limit: int,
) -> Execute:
    """The next `limit` visible records matching `filter` in the page's order (Rules 3-4),
    decoded by `page_rows`. `order_field` None: key order."""
    scope, params = _scope(grant, connection_id)
    keys = [records.c.connection_id, records.c.record_id]
    conditions = [scope, filter_condition(filter, records)]
    if order_field is None:
        if after is not None:
            conditions.append(_after(keys, after[1:], direction))
        ordering = [column.desc() if direction == "desc" else column.asc() for column in keys]
        statement = (
            select(records.c.connection_id, records.c.record_id, literal_column("NULL").label("v"))
            .where(*conditions)
            .order_by(*ordering)
        )
        return Execute(statement.limit(bindparam("q_limit", limit, type_=Integer)), params)
    value_column = _order_value(order_kind)
    kind_ok = (
        and_(field_values.c.kind == literal_column("'string'"), field_values.c.instant.is_not(None))
        if order_kind == "instant"
        else field_values.c.kind == literal_column("'number'")
    )
    joined = records.outerjoin(
        field_values,
        and_(
            same_record(field_values, records),
            field_values.c.path == order_field,
            field_values.c.element == 0,
            kind_ok,
        ),
    )
    missing = value_column.is_(None)
    if after is not None:
        value, *rest = after
        if value is None:
            conditions.append(and_(missing, _after(keys, rest, direction)))
        else:
            bound = _value(value, order_kind)
            conditions.append(
                or_(
                    missing,
                    and_(not_(missing), _after([value_column, *keys], [bound, *rest], direction)),
                )
            )
    ordering = [
        column.desc() if direction == "desc" else column.asc() for column in (value_column, *keys)
    ]
    statement = (
        select(records.c.connection_id, records.c.record_id, value_column.label("v"))
        .select_from(joined)
        .where(*conditions)
        .order_by(missing, *ordering)
    )
    return Execute(statement.limit(bindparam("q_limit", limit, type_=Integer)), params)


@dataclass(frozen=True, slots=True)
class PageRow:
    connection_id: str
    record_id: str
    value: OrderValue


def _order_value_of(raw: Any) -> OrderValue:
    if isinstance(raw, Decimal):
        integral = raw == raw.to_integral_value()
        return int(raw) if integral else float(raw)
    if isinstance(raw, bool):
        return int(raw)
    if raw is None or isinstance(raw, str | int | float):
        return raw
    return str(raw)


def page_rows(rows: Rows | None) -> list[PageRow]:
    return [
        PageRow(str(row["connection_id"]), str(row["record_id"]), _order_value_of(row["v"]))
        for row in rows or ()
    ]


def record_count(grant: StreamGrant, filter: Filter, *, connection_id: str | None) -> Execute:
    """How many visible records match `filter` (decoded by `match_count`)."""
    scope, params = _scope(grant, connection_id)
    statement = (
        select(func.count().label("n"))
        .select_from(records)
        .where(scope, filter_condition(filter, records))
    )
    return Execute(statement, params)


def match_count(rows: Rows | None) -> int:
    return int(rows[0]["n"]) if rows else 0


def changes_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    positions: Mapping[str, int],
    limit: int,
) -> Execute:
    """The next `limit` changes after `positions` (per connection, the last change seen) in
    (connection_id, change_seq) order: visible records matching `filter` and tombstones of
    records that would be visible were they not deleted (Rules 1, 4), decoded by
    `change_rows`."""
    shape, terms = grant_terms(grant)
    scope = visibility.visible_records(shape, with_deleted=True)
    if connection_id is not None:
        scope = and_(scope, records.c.connection_id == connection_id)
    named = sorted(positions)
    since = [
        and_(records.c.connection_id == conn, records.c.change_seq > positions[conn])
        for conn in named
    ]
    if named:
        since.append(records.c.connection_id.not_in(named))
    statement = (
        select(
            records.c.connection_id,
            records.c.record_id,
            records.c.change_seq,
            records.c.deleted,
        )
        .where(
            scope,
            or_(*since) if since else literal_column("1") == 1,
            or_(records.c.deleted == True, filter_condition(filter, records)),  # noqa: E712
        )
        .order_by(records.c.connection_id, records.c.change_seq)
        .limit(bindparam("q_limit", limit, type_=Integer))
    )
    return Execute(statement, dict(terms))


@dataclass(frozen=True, slots=True)
class ChangeRow:
    connection_id: str
    record_id: str
    change_seq: int
    deleted: bool


def change_rows(rows: Rows | None) -> list[ChangeRow]:
    return [
        ChangeRow(
            str(row["connection_id"]),
            str(row["record_id"]),
            int(row["change_seq"]),
            bool(row["deleted"]),
        )
        for row in rows or ()
    ]


def counter_tops(connection_ids: Sequence[str]) -> Execute:
    """The change sequence's top of each named connection (decoded by `tops`)."""
    return Execute(
        select(change_counters.c.connection_id, change_counters.c.last_change_seq).where(
            change_counters.c.connection_id.in_(list(connection_ids))
        ),
        bounded=True,
    )


def tops(rows: Rows | None) -> dict[str, int]:
    return {str(row["connection_id"]): int(row["last_change_seq"]) for row in rows or ()}


def row_fields(
    grant: StreamGrant,
    keys: Sequence[tuple[str, str]],
    paths: Sequence[str] | None,
    preview_chars: int,
) -> Execute:
    """The metadata, item count and first `preview_chars` code points (text-like fields) of the
    listed records' fields: `paths` (already checked against the grant), or every granted field
    when None (Rule 5); decoded by `row_previews`."""
    shape, terms = grant_terms(grant)
    params = dict(terms)
    chosen: list[ColumnElement[bool]] = [
        same_record(fields, records),
        tuple_(fields.c.connection_id, fields.c.record_id).in_(list(keys)),
    ]
    if paths is not None:
        params["p_only"] = sorted(paths)
        chosen.append(in_ids(fields.c.path, "p_only"))
    elif grant.fields is not None:
        params["p_fields"] = sorted(grant.fields)
        chosen.append(in_ids(fields.c.path, "p_fields"))
    first_chunk = and_(
        same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no == 0,
        kind_in(text_like=True),
    )
    statement = (
        select(
            fields.c.connection_id,
            fields.c.record_id,
            *FIELD_META,
            fields.c.item_count,
            func.substr(
                field_chunks.c.text, 1, bindparam("p_chars", preview_chars, type_=Integer)
            ).label("head"),
        )
        .select_from(
            records.join(fields, same_record(fields, records)).outerjoin(field_chunks, first_chunk)
        )
        .where(*chosen, visibility.visible_records(shape))
        .order_by(fields.c.connection_id, fields.c.record_id, fields.c.path)
    )
    return Execute(statement, params)


RowField = tuple[Any, int | None, str | None]
"""(FieldInfo, item count, head) of one field of a listed record."""


def row_previews(rows: Rows | None) -> dict[tuple[str, str], list[RowField]]:
    """`row_fields`' answer per (connection_id, record_id), fields in path order."""
    found: dict[tuple[str, str], list[RowField]] = {}
    for row in rows or ():
        info = field_info(row)
        if info is not None:
            key = (str(row["connection_id"]), str(row["record_id"]))
            found.setdefault(key, []).append((info, row["item_count"], row["head"]))
    return found
