"""`query_records` statements (docs/contract.md §11.2): a page of a stream's visible records in
order, their count, a page of changes, and the projected fields of a page's records.

Rules:
1. Every statement carries the stream grant's visibility condition
   (`visibility.visible_records`) on `records`, so a hidden record gives no row at all; a changes
   page takes the same condition without its `deleted` term (`with_deleted`), a deleted record
   giving a tombstone exactly where it would be visible were it not deleted.
2. A filter is `filters.filter_condition`, beside the visibility condition, on the same rows.
3. A page in field order reads each record's order value: the `field_values` row (element 0) of
   the order field, its `instant` where the order field holds date-times (`OrderKind`
   `instant`), else its `num`. The records with one come first (`valued_page`, along the value
   index, or led by a selective equality's rows), then those without (`missing_page`, key
   order). Rows go in the page's direction by (value, connection_id, record_id), keyset pages
   strictly after the cursor's tuple: a page never skips or repeats a record while the data
   does not change.
4. A page in key order (`key_page`) is the same without the value. Changes pages are
   `_sql.changes`'.
5. The projected fields are read only for the page's keys and only for the granted paths chosen
   in Python before the statement is built; text-like values come as their first
   `preview_chars` code points (one chunk at most).
6. Each page and count statement is built once per shape (`shapes.per_shape`): the grant's
   and the filter's shapes (`shapes.shaped`: which terms, operators and value kinds),
   whether one connection is asked and how many are covered, the order's kind and direction,
   which clause leads and which ranges bound the order value, and whether a cursor positions
   the page. Everything else is a named parameter: the grant's values (`g_*`), the filter's
   fields and values (`q_f<n>_*`), the connections (`q_conn`, `q_conns_<i>`), the order
   field (`q_order_field`), the cursor's position (`q_after_*`) and the limits. So a page
   costs one cached plan, not a build and a compile; and no value, granted or not, is ever
   statement text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache, partial
from typing import Any, Literal

from sqlalchemy import (
    ColumnElement,
    Integer,
    Select,
    and_,
    bindparam,
    exists,
    func,
    literal_column,
    select,
    tuple_,
)

from pdpp_store._core.filters import Clause, Equals, Filter, Has, OneOf, Range
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .dialects import BoundColumns, Capabilities, ExactNumber, bound_rows
from .filters import (
    FilterShape,
    named,
    range_bound,
    shaped_clause_rows,
    shaped_condition,
)
from .reads import FIELD_META, field_info
from .requests import Execute, Rows
from .shapes import per_shape, shaped
from .tables import field_chunks, field_values, fields, records
from .visibility import GrantShape, grant_terms, in_ids, kind_in, same_record

__all__ = [
    "OrderKind",
    "PageRow",
    "few_matches",
    "key_page",
    "match_count",
    "missing_page",
    "page_rows",
    "record_count",
    "row_fields",
    "row_previews",
    "valued_page",
]

OrderKind = Literal["instant", "number"]
Direction = Literal["asc", "desc"]
OrderValue = str | int | float | None
PageKey = tuple[OrderValue, str, str]
"""A position in a page's order: (order value or None, connection_id, record_id)."""


def _scope(shape: GrantShape, scoped: bool) -> ColumnElement[bool]:
    """The stream grant's visibility condition (Rule 1), and with `scoped` the one connection
    asked (`q_conn`)."""
    condition = visibility.visible_records(shape)
    if scoped:
        condition = and_(condition, records.c.connection_id == bindparam("q_conn"))
    return condition


def _params(
    grant: StreamGrant, filter: Filter, connection_id: str | None = None
) -> tuple[GrantShape, FilterShape, dict[str, Any]]:
    """The grant's and the filter's shapes, and the parameters of both and of the connection
    asked (Rule 6)."""
    shape, filtered, params = shaped(grant, filter)
    if connection_id is not None:
        params["q_conn"] = connection_id
    return shape, filtered, params


def _connections(params: dict[str, Any], connections: Sequence[str]) -> int:
    """Binds the covered connections (`q_conns_<i>`); their number is part of a shape."""
    for number, connection in enumerate(connections):
        params[f"q_conns_{number}"] = connection
    return len(connections)


def _connection_in(column: ColumnElement[str], count: int) -> ColumnElement[bool]:
    if count == 1:
        return column == bindparam("q_conns_0")
    return column.in_([bindparam(f"q_conns_{number}") for number in range(count)])


_ORDER = field_values.alias("order_value")
"""The order field's `field_values` row of each listed record."""


def _order_value(kind: OrderKind) -> ColumnElement[Any]:
    return _ORDER.c.instant if kind == "instant" else _ORDER.c.num


def _value_type(kind: OrderKind) -> Any:
    return ExactNumber() if kind == "number" else _ORDER.c.instant.type


def _ordered(columns: Sequence[ColumnElement[Any]], direction: Direction) -> list[Any]:
    return [column.desc() if direction == "desc" else column.asc() for column in columns]


def _beyond(
    columns: Sequence[ColumnElement[Any]], values: Sequence[Any], direction: Direction
) -> ColumnElement[bool]:
    """Rows strictly after `values` over `columns` in `direction`, as one row-value comparison
    (which both databases can use as an index range when the columns follow the index)."""
    left, right = tuple_(*columns), tuple_(*values)
    return left < right if direction == "desc" else left > right


def key_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    direction: Direction,
    after: tuple[str, str] | None,
    limit: int,
) -> Execute:
    """The next `limit` visible records matching `filter` in key order (Rule 4), decoded by
    `page_rows` (no order value)."""
    shape, filtered, params = _params(grant, filter, connection_id)
    params["q_limit"] = limit
    if after is not None:
        params["q_after_conn"], params["q_after_id"] = after
    statement = _key_page(shape, filtered, connection_id is not None, direction, after is not None)
    return Execute(statement, params)


@per_shape
def _key_page(
    shape: GrantShape, filtered: FilterShape, scoped: bool, direction: Direction, after: bool
) -> Select[Any]:
    keys = [records.c.connection_id, records.c.record_id]
    conditions = [_scope(shape, scoped), shaped_condition(filtered, records)]
    if after:
        position: list[Any] = [bindparam("q_after_conn"), bindparam("q_after_id")]
        conditions.append(_beyond(keys, position, direction))
    return (
        select(records.c.connection_id, records.c.record_id, literal_column("NULL").label("v"))
        .where(*conditions)
        .order_by(*_ordered(keys, direction))
        .limit(bindparam("q_limit", type_=Integer))
    )


def _order_row(order_kind: OrderKind) -> ColumnElement[bool]:
    """`_ORDER` is the order field's (`q_order_field`) comparable row of its kind for the
    record of `records`."""
    kind_ok = (
        and_(_ORDER.c.kind == literal_column("'string'"), _ORDER.c.instant.is_not(None))
        if order_kind == "instant"
        else _ORDER.c.kind == literal_column("'number'")
    )
    return and_(
        same_record(_ORDER, records),
        _ORDER.c.path == bindparam("q_order_field"),
        _ORDER.c.element == 0,
        kind_ok,
    )


def valued_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connections: Sequence[str],
    order_field: str,
    order_kind: OrderKind,
    direction: Direction,
    after: PageKey | None,
    limit: int,
    drive: Clause | None = None,
) -> Execute:
    """The next `limit` visible records matching `filter` that have an order value, in the
    page's order (Rule 3), decoded by `page_rows`. The statement is driven by the order field's
    value index (`ix_field_values_instant` or `_num`): `connections` are the covered
    connections declaring the stream, and with one of them the rows come in the index's own
    order, a page after the cursor being a range of it."""
    shape, filtered, params = _params(grant, filter)
    count = _connections(params, connections)
    params["q_limit"] = limit
    params["q_order_field"] = order_field
    if after is not None:
        params["q_after_value"] = after[0]
        params["q_after_conn"], params["q_after_id"] = after[1:]
    driven = None if drive is None else filter.clauses.index(drive)
    ranged = tuple(
        number
        for number, clause in enumerate(filter.clauses)
        if isinstance(clause, Range) and clause.field == order_field and clause.kind == order_kind
    )
    statement = _valued_page(
        shape,
        filtered,
        driven=driven,
        ranged=ranged,
        count=count,
        order_kind=order_kind,
        direction=direction,
        after=after is not None,
    )
    return Execute(statement, params)


@per_shape
def _valued_page(
    shape: GrantShape,
    filtered: FilterShape,
    *,
    driven: int | None,
    ranged: tuple[int, ...],
    count: int,
    order_kind: OrderKind,
    direction: Direction,
    after: bool,
) -> Select[Any]:
    value = _order_value(order_kind)
    conditions = [
        _order_row(order_kind),
        _ORDER.c.stream == bindparam("g_stream"),
        _scope(shape, False),
        shaped_condition(filtered, records, skip=driven),
    ]
    source: Any = _ORDER.join(records, same_record(_ORDER, records))
    if driven is not None:  # a clause few visible records match: its value index leads
        conditions += [
            shaped_clause_rows(filtered, driven, _DRIVE),
            _DRIVE.c.stream == bindparam("g_stream"),
            _connection_in(_DRIVE.c.connection_id, count),
        ]
        source = _DRIVE.join(records, same_record(_DRIVE, records)).join(
            _ORDER, same_record(_ORDER, records)
        )
    conditions.append(_connection_in(_ORDER.c.connection_id, count))
    position_value = bindparam("q_after_value", type_=_value_type(order_kind))
    if count == 1:
        keys = [value, _ORDER.c.record_id]
        position = [position_value, bindparam("q_after_id")]
    else:
        keys = [value, _ORDER.c.connection_id, _ORDER.c.record_id]
        position = [position_value, bindparam("q_after_conn"), bindparam("q_after_id")]
    if after:
        conditions.append(_beyond(keys, position, direction))
    conditions += _order_range(filtered, ranged, value)
    return (
        select(records.c.connection_id, records.c.record_id, value.label("v"))
        .select_from(source)
        .where(*conditions)
        .order_by(*_ordered(keys, direction))
        .limit(bindparam("q_limit", type_=Integer))
    )


_DRIVE = field_values.alias("drive")
"""The rows of the clause that leads a page driven by its value index (`valued_page`)."""


def few_matches(
    grant: StreamGrant, filter: Filter, connections: Sequence[str], clause: Clause, cap: int
) -> Execute:
    """How many visible records of `connections` match `clause` of `filter`, counted no
    further than `cap` (decoded by `match_count`): whether a page should be driven by the
    clause's value index. Only visible records count, so the plan chosen depends on nothing
    the grant hides."""
    shape, filtered, params = _params(grant, filter)
    count = _connections(params, connections)
    params["q_cap"] = cap
    statement = _few_matches(shape, filtered, filter.clauses.index(clause), count)
    return Execute(statement, params)


@per_shape
def _few_matches(shape: GrantShape, filtered: FilterShape, number: int, count: int) -> Select[Any]:
    matching = (
        select(literal_column("1").label("one"))
        .select_from(_DRIVE.join(records, same_record(_DRIVE, records)))
        .where(
            _connection_in(_DRIVE.c.connection_id, count),
            _DRIVE.c.stream == bindparam("g_stream"),
            shaped_clause_rows(filtered, number, _DRIVE),
            _scope(shape, False),
        )
        .limit(bindparam("q_cap", type_=Integer))
        .subquery("matching")
    )
    return select(func.count().label("n")).select_from(matching)


def _order_range(
    filtered: FilterShape, ranged: tuple[int, ...], value: ColumnElement[Any]
) -> list[ColumnElement[bool]]:
    """A filter's ranges on the order field (clauses `ranged`, of the order's kind), as bounds
    on the order value the page is driven by: the same rows (on the same comparable row), so
    the index range is walked, not the whole index with the range re-checked per row."""
    bounds: list[ColumnElement[bool]] = []
    for number in ranged:
        clause = filtered[number]
        for position in range(len(clause.ops)):
            op, limit = range_bound(clause, position, named(number), _ORDER)
            bounds.append(
                {"gt": value > limit, "gte": value >= limit, "lt": value < limit}.get(
                    op, value <= limit
                )
            )
    return bounds


def missing_page(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    order_field: str,
    order_kind: OrderKind,
    direction: Direction,
    after: tuple[str, str] | None,
    limit: int,
) -> Execute:
    """The next `limit` visible records matching `filter` without an order value, in key order
    (they come after every record with one: Rule 3), decoded by `page_rows`."""
    shape, filtered, params = _params(grant, filter, connection_id)
    params["q_limit"] = limit
    params["q_order_field"] = order_field
    if after is not None:
        params["q_after_conn"], params["q_after_id"] = after
    statement = _missing_page(
        shape,
        filtered,
        scoped=connection_id is not None,
        order_kind=order_kind,
        direction=direction,
        after=after is not None,
    )
    return Execute(statement, params)


@per_shape
def _missing_page(
    shape: GrantShape,
    filtered: FilterShape,
    *,
    scoped: bool,
    order_kind: OrderKind,
    direction: Direction,
    after: bool,
) -> Select[Any]:
    keys = [records.c.connection_id, records.c.record_id]
    conditions = [
        _scope(shape, scoped),
        shaped_condition(filtered, records),
        ~exists(
            select(literal_column("1"))
            .select_from(_ORDER)
            .where(_order_row(order_kind))
            .correlate(records)
        ),
    ]
    if after:
        position: list[Any] = [bindparam("q_after_conn"), bindparam("q_after_id")]
        conditions.append(_beyond(keys, position, direction))
    return (
        select(records.c.connection_id, records.c.record_id, literal_column("NULL").label("v"))
        .where(*conditions)
        .order_by(*_ordered(keys, direction))
        .limit(bindparam("q_limit", type_=Integer))
    )


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


def record_count(
    grant: StreamGrant,
    filter: Filter,
    *,
    connection_id: str | None,
    connections: Sequence[str] = (),
) -> Execute:
    """How many visible records match `filter` (decoded by `match_count`). With an equality
    clause (`eq`, `in`, `has`), the count is driven by that clause's rows in its value index
    (`clause_rows`: at most one per record), the rest of the filter and the visibility checked
    per match, instead of every visible record being checked against the filter."""
    shape, filtered, params = _params(grant, filter, connection_id)
    count = _connections(params, connections)
    drive = next(
        (n for n, c in enumerate(filter.clauses) if isinstance(c, Equals | OneOf | Has)), None
    )
    statement = _record_count(
        shape, filtered, connection_id is not None, None if count == 0 else drive, count
    )
    return Execute(statement, params)


@per_shape
def _record_count(
    shape: GrantShape, filtered: FilterShape, scoped: bool, driven: int | None, count: int
) -> Select[Any]:
    if driven is None:
        return (
            select(func.count().label("n"))
            .select_from(records)
            .where(_scope(shape, scoped), shaped_condition(filtered, records))
        )
    return (
        select(func.count().label("n"))
        .select_from(_DRIVE.join(records, same_record(_DRIVE, records)))
        .where(
            _connection_in(_DRIVE.c.connection_id, count),
            _DRIVE.c.stream == bindparam("g_stream"),
            shaped_clause_rows(filtered, driven, _DRIVE),
            _scope(shape, scoped),
            shaped_condition(filtered, records, skip=driven),
        )
    )


def match_count(rows: Rows | None) -> int:
    return int(rows[0]["n"]) if rows else 0


def row_fields(
    grant: StreamGrant,
    keys: Sequence[tuple[str, str]],
    paths: Sequence[str] | None,
    preview_chars: int,
) -> Execute:
    """The metadata, item count and first `preview_chars` code points (text-like fields) of the
    listed records' fields: `paths` (already checked against the grant), or every granted field
    when None (Rule 5); decoded by `row_previews`. The keys are bound as one JSON parameter and
    joined by key (`dialects.bound_rows`), so each record is found by its primary key."""
    shape, terms = grant_terms(grant)
    params: dict[str, Any] = {
        **terms,
        "k_keys": json.dumps([list(key) for key in keys], ensure_ascii=False),
        "p_chars": preview_chars,
    }
    if paths is not None:
        params["p_only"] = sorted(paths)
    elif grant.fields is not None:
        params["p_fields"] = sorted(grant.fields)
    narrowed = "only" if paths is not None else "granted" if grant.fields is not None else "all"
    return Execute(partial(_row_fields, shape, narrowed), params)


_KEY_COLUMNS: BoundColumns = (("connection_id", True), ("record_id", True))


@cache
def _row_fields(shape: GrantShape, narrowed: str, caps: Capabilities) -> Select[Any]:
    wanted = bound_rows(caps, "k_keys", _KEY_COLUMNS)
    chosen: list[ColumnElement[bool]] = []
    if narrowed == "only":
        chosen.append(in_ids(fields.c.path, "p_only"))
    elif narrowed == "granted":
        chosen.append(in_ids(fields.c.path, "p_fields"))
    first_chunk = and_(
        same_record(field_chunks, fields),
        field_chunks.c.path == fields.c.path,
        field_chunks.c.chunk_no == 0,
        kind_in(text_like=True),
    )
    joined = (
        wanted.join(
            records,
            and_(
                records.c.connection_id == wanted.c.connection_id,
                records.c.record_id == wanted.c.record_id,
                records.c.stream == bindparam("g_stream"),
            ),
        )
        .join(fields, same_record(fields, records))
        .outerjoin(field_chunks, first_chunk)
    )
    return (
        select(
            fields.c.connection_id,
            fields.c.record_id,
            *FIELD_META,
            fields.c.item_count,
            func.substr(field_chunks.c.text, 1, bindparam("p_chars", type_=Integer)).label("head"),
        )
        .select_from(joined)
        .where(*chosen, visibility.visible_records(shape))
        .order_by(fields.c.connection_id, fields.c.record_id, fields.c.path)
    )


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
