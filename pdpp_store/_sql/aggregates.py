"""Aggregate statements (docs/contract.md §12): a stream's visible records counted, summed,
ranged and grouped in SQL, over the comparable values the write path stores (`field_values`,
`tables` Rule 8). No row of the stream reaches Python: only the answer's few rows do.

Rules:
1. Every statement reads `records` under the grant's visibility (`visibility.visible_records`)
   and the filter's condition (`filters.filter_condition`); the fields aggregated or grouped are
   joined by key (their own value, `element` 0) with an outer join, so a record without the field
   still counts, in the group whose key is null.
2. Numbers are `num` (exact NUMERIC), instants `instant`, strings and booleans `text` (folded,
   `stored_text`). A sum is exact where the database sums NUMERIC exactly
   (`Capabilities.sums_exactly`); elsewhere integers are summed exactly in two 32-bit halves
   (a sum of 64-bit integers could overflow) and non-integral numbers as doubles.
3. Time buckets (`_core.aggregates` rule 5) are integer arithmetic on the instant's text: its
   date and time read by position (`YYYY-MM-DDTHH:MM:SS`), the date counted in days since
   0000-03-01 (the civil-days algorithm, integers only), the zone's offset chosen by a balanced
   tree of comparisons with the bound offset changes. The parsing and the arithmetic each run once
   per record, in inner selects fenced with `OFFSET 0`, so no database inlines them into each use.
4. Grouped answers are ordered in SQL (largest value first, ties by key; time buckets oldest
   first, the null bucket last), cut to `limit`, and carry the number of records in all groups
   (a window sum over the groups), from which the operation tells `other_count`.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Select,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal,
    literal_column,
    null,
    select,
    type_coerce,
)
from sqlalchemy.types import NullType

from pdpp_store._core.aggregates import END_INSTANT, FIRST_INSTANT, OffsetChanges
from pdpp_store._core.filters import Filter
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .dialects import Capabilities
from .filters import filter_condition
from .requests import Execute, Row, Rows
from .tables import field_values, records
from .visibility import grant_terms, same_record

__all__ = [
    "AggregatePlan",
    "GroupRow",
    "aggregate",
    "aggregate_groups",
    "aggregate_value",
    "instant_range",
    "instant_span",
]


@dataclass(frozen=True, slots=True)
class AggregatePlan:
    """What one aggregate statement computes (checked by the operation)."""

    metric: str
    field: str | None
    reads_numbers: bool
    group_by: str | None = None
    group_by_time: str | None = None
    granularity: str = "month"
    offsets: OffsetChanges | None = None
    limit: int = 25


def _kind(table: Any, name: str) -> ColumnElement[bool]:
    return table.c.kind == literal_column(f"'{name}'")  # type: ignore[no-any-return]


def _value_join(table: Any, param: str) -> ColumnElement[bool]:
    return and_(same_record(table, records), table.c.path == bindparam(param), table.c.element == 0)


def _where(grant: StreamGrant, connection_id: str | None, filter: Filter) -> tuple[Any, ...]:
    shape, _ = grant_terms(grant)
    conditions: list[ColumnElement[bool]] = [visibility.visible_records(shape)]
    if connection_id is not None:
        conditions.append(records.c.connection_id == bindparam("a_conn"))
    if filter:
        conditions.append(filter_condition(filter, records))
    return tuple(conditions)


def _params(grant: StreamGrant, connection_id: str | None, plan: AggregatePlan) -> dict[str, Any]:
    params = dict(grant_terms(grant)[1])
    if connection_id is not None:
        params["a_conn"] = connection_id
    if plan.field is not None:
        params["a_field"] = plan.field
    if plan.group_by is not None or plan.group_by_time is not None:
        params["a_group"] = plan.group_by or plan.group_by_time
    if plan.offsets is not None:
        params["a_first"] = FIRST_INSTANT
        params["a_end"] = END_INSTANT
        params["a_o0"] = plan.offsets.first
        for number, (at, offset) in enumerate(plan.offsets.changes, start=1):
            params[f"a_t{number}"] = at
            params[f"a_o{number}"] = offset
    return params


# ---------------------------------------------------------------- the range of instants


def instant_range(
    grant: StreamGrant, connection_id: str | None, filter: Filter, path: str
) -> Execute:
    """The lowest and highest instant of `path` among the visible records (decoded by
    `instant_span`): the range the zone's offsets are computed over."""
    grouped = field_values.alias("a_grouped")
    statement = (
        select(func.min(grouped.c.instant).label("low"), func.max(grouped.c.instant).label("high"))
        .select_from(records.join(grouped, _value_join(grouped, "a_group")))
        .where(*_where(grant, connection_id, filter))
    )
    params = dict(grant_terms(grant)[1])
    params["a_group"] = path
    if connection_id is not None:
        params["a_conn"] = connection_id
    return Execute(statement, params)


def instant_span(rows: Rows) -> tuple[str, str] | None:
    if not rows or rows[0]["low"] is None:
        return None
    return str(rows[0]["low"]), str(rows[0]["high"])


# ---------------------------------------------------------------- buckets in integers


def _int(text: ColumnElement[Any], start: int, length: int) -> ColumnElement[int]:
    return cast(func.substr(text, start, length), BigInteger)


def _days_from_civil(
    year: ColumnElement[int], month: ColumnElement[int], day: ColumnElement[int]
) -> ColumnElement[int]:
    """Days since 0000-03-01 of a civil date (year >= 1): integers only, all non-negative."""
    shifted = year - case((month <= 2, 1), else_=0)
    era = shifted // 400
    year_of_era = shifted - era * 400
    march_month = case((month > 2, month - 3), else_=month + 9)
    day_of_year = (march_month * 153 + 2) // 5 + day - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era


def _offset_tree(instant: ColumnElement[str], low: int, high: int) -> ColumnElement[int] | Any:
    """The offset of `instant` among changes low..high (change 0 is the first offset): a
    balanced tree of comparisons with the changes' instants."""
    if low == high:
        return bindparam(f"a_o{low}", type_=BigInteger)
    middle = (low + high + 1) // 2
    return case(
        (instant < bindparam(f"a_t{middle}"), _offset_tree(instant, low, middle - 1)),
        else_=_offset_tree(instant, middle, high),
    )


def _parsed(instant: ColumnElement[str]) -> list[Any]:
    """An instant's text read by position: its year, month, day and second of the day."""
    clock = _int(instant, 12, 2) * 3600 + _int(instant, 15, 2) * 60 + _int(instant, 18, 2)
    return [
        instant.label("g_instant"),
        _int(instant, 1, 4).label("g_year"),
        _int(instant, 6, 2).label("g_month"),
        _int(instant, 9, 2).label("g_day"),
        clock.label("g_clock"),
    ]


def _local_seconds(parsed: Any, offsets: OffsetChanges) -> tuple[Any, Any]:
    """(local seconds since 0000-03-01, offset) of a parsed instant (`_parsed`'s columns);
    NULL outside the bucketed range."""
    instant = parsed.c.g_instant
    days = _days_from_civil(parsed.c.g_year, parsed.c.g_month, parsed.c.g_day)
    offset = _offset_tree(instant, 0, len(offsets.changes))
    inside = and_(instant >= bindparam("a_first"), instant < bindparam("a_end"))
    local = case((inside, days * 86400 + parsed.c.g_clock + offset), else_=null())
    return local, case((inside, offset), else_=null())


def _civil_month(days: Any) -> Any:
    """`year * 12 + month - 1` of a day number (the civil-from-days algorithm)."""
    era = days // 146097
    day_of_era = days - era * 146097
    year_of_era = (
        day_of_era - day_of_era // 1460 + day_of_era // 36524 - day_of_era // 146096
    ) // 365
    day_of_year = day_of_era - (year_of_era * 365 + year_of_era // 4 - year_of_era // 100)
    march_month = (day_of_year * 5 + 2) // 153
    month = case((march_month < 10, march_month + 3), else_=march_month - 9)
    year = year_of_era + era * 400 + case((month <= 2, 1), else_=0)
    return year * 12 + month - 1


def _bucket(granularity: str, local: Any) -> Any:
    if granularity == "hour":
        return local // 3600
    days = local // 86400
    if granularity == "day":
        return days
    if granularity == "week":
        return (days + 2) // 7
    month = _civil_month(days)
    return month if granularity == "month" else month // 12


# ---------------------------------------------------------------- the statement


def _raw(column: Any) -> Any:
    """A column read as the driver gives it (a NUMERIC as `Decimal`, no result conversion)."""
    return type_coerce(column, NullType())


def _metric(plan: AggregatePlan, caps: Capabilities, rows: Any) -> list[Any]:
    """The metric's columns over the inner rows (`m_kind`, `m_num`, `m_text`, `m_instant`)."""
    if plan.metric == "count":
        return [func.count().label("value")]
    number = case((rows.c.m_kind == literal("number"), rows.c.m_num), else_=null())
    if plan.metric == "count_distinct":
        shown = func.coalesce(rows.c.m_text, cast(rows.c.m_num, Text))
        distinct = case(
            (rows.c.m_kind != literal("null"), rows.c.m_kind.op("||")(":").op("||")(shown)),
            else_=null(),
        )
        return [func.count(distinct.distinct()).label("value")]
    if plan.metric in ("min", "max"):
        column = number if plan.reads_numbers else rows.c.m_instant
        function = func.min if plan.metric == "min" else func.max
        return [_raw(function(column)).label("value")]
    if caps.sums_exactly:
        return [_raw(func.sum(number)).label("value")]
    integral = rows.c.m_kind == literal("number")
    whole = and_(integral, func.typeof(rows.c.m_num) == literal("integer"))
    fraction = and_(integral, func.typeof(rows.c.m_num) == literal("real"))
    return [
        func.sum(case((whole, rows.c.m_num.op(">>")(32)), else_=null())).label("sum_high"),
        func.sum(case((whole, rows.c.m_num.op("&")(4294967295)), else_=null())).label("sum_low"),
        func.total(case((fraction, rows.c.m_num), else_=null())).label("sum_real"),
        func.count(case((fraction, 1), else_=null())).label("sum_reals"),
    ]


def _inner(
    plan: AggregatePlan, grant: StreamGrant, connection_id: str | None, filter: Filter
) -> Any:
    columns: list[Any] = [records.c.record_id.label("r_id")]
    joined: Any = records
    if plan.field is not None:
        measured = field_values.alias("a_measured")
        joined = joined.outerjoin(measured, _value_join(measured, "a_field"))
        columns += [
            measured.c.kind.label("m_kind"),
            measured.c.num.label("m_num"),
            measured.c.text.label("m_text"),
            measured.c.instant.label("m_instant"),
        ]
    if plan.group_by is not None or plan.group_by_time is not None:
        grouped = field_values.alias("a_grouped")
        joined = joined.outerjoin(grouped, _value_join(grouped, "a_group"))
        if plan.group_by is not None:
            columns += [
                func.coalesce(grouped.c.kind, literal("null")).label("g_kind"),
                grouped.c.text.label("g_text"),
                _raw(grouped.c.num).label("g_num"),
            ]
        else:
            columns += _parsed(grouped.c.instant)
    statement = select(*columns).select_from(joined).where(*_where(grant, connection_id, filter))
    if plan.group_by_time is None:
        return statement.subquery("a_rows")
    assert plan.offsets is not None
    # Rule 3: each step fenced, so no database inlines the text's parsing into the arithmetic
    parsed = statement.offset(0).subquery("a_parsed")
    local, offset = _local_seconds(parsed, plan.offsets)
    kept = [column for column in parsed.c if not column.name.startswith("g_")]
    stepped = select(*kept, local.label("g_local"), offset.label("g_offset")).offset(0)
    return stepped.subquery("a_rows")


def _largest_first(plan: AggregatePlan, caps: Capabilities, metric: list[Any]) -> list[Any]:
    """Groups by their value, largest first: a sum of nothing is 0, a min or max of nothing
    (null) comes last. Where sums are built from parts (Rule 2), they are ordered by the parts
    added as a double: exact while sums stay within 2**53, else by the nearest doubles."""
    if plan.metric == "sum":
        if caps.sums_exactly:
            return [func.coalesce(metric[0].element, 0).desc()]
        high, low, real = (column.element for column in metric[:3])
        added = func.coalesce(high, 0) * literal_column("4294967296.0") + func.coalesce(low, 0)
        return [(added + real).desc()]
    value = metric[0].element
    return [case((value.is_(None), 1), else_=0), value.desc()]


def aggregate(
    plan: AggregatePlan, grant: StreamGrant, connection_id: str | None, filter: Filter
) -> Execute:
    """The aggregate (decoded by `aggregate_value` or, grouped, `aggregate_groups`)."""
    params = _params(grant, connection_id, plan)

    def build(caps: Capabilities) -> Select[Any]:
        rows = _inner(plan, grant, connection_id, filter)
        metric = _metric(plan, caps, rows)
        if plan.group_by is None and plan.group_by_time is None:
            return select(*metric).select_from(rows)
        total = func.sum(func.count()).over().label("total")
        if plan.group_by is not None:
            keys = [rows.c.g_kind, rows.c.g_text, rows.c.g_num]
            ordering = _largest_first(plan, caps, metric)
            ordering += [rows.c.g_kind, rows.c.g_text, rows.c.g_num]
            return (
                select(*keys, *metric, func.count().label("records"), total)
                .group_by(*keys)
                .order_by(*ordering)
                .limit(plan.limit)
            )
        bucket = _bucket(plan.granularity, rows.c.g_local)
        keys = [bucket.label("g_bucket")]
        if plan.granularity == "hour":
            keys.append(rows.c.g_offset)
        grouping = [bucket] + ([rows.c.g_offset] if plan.granularity == "hour" else [])
        ordering = [case((bucket.is_(None), 1), else_=0), bucket]
        if plan.granularity == "hour":
            ordering.append(rows.c.g_offset.desc())
        return (
            select(*keys, *metric, func.count().label("records"), total)
            .group_by(*grouping)
            .order_by(*ordering)
            .limit(plan.limit)
        )

    return Execute(build, params)


# ---------------------------------------------------------------- decoding


def _number(value: Any) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return int(value) if isinstance(value, int) else float(value)


def _sum(row: Row, caps_exact: bool) -> int | float:
    if caps_exact or "sum_high" not in row:
        found = row["value"]
        return 0 if found is None else (_number(found) or 0)
    whole = int(row["sum_high"] or 0) * 4294967296 + int(row["sum_low"] or 0)
    if not row["sum_reals"]:
        return whole
    exact = Decimal(whole) + Decimal(repr(float(row["sum_real"])))
    return int(exact) if exact == exact.to_integral_value() else float(exact)


def _value(plan: AggregatePlan, row: Row) -> int | float | str | None:
    if plan.metric in ("count", "count_distinct"):
        return int(row["value"] or 0)
    if plan.metric == "sum":
        return _sum(row, "sum_high" not in row)
    found = row["value"]
    if found is None:
        return None
    if plan.reads_numbers:
        return _number(found)
    return str(found)


def aggregate_value(plan: AggregatePlan, rows: Rows) -> int | float | str | None:
    """The ungrouped answer: the metric over every visible matching record."""
    return _value(plan, rows[0]) if rows else _value(plan, {"value": None})


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One group as the statement numbers it: its key's parts, value and record count."""

    kind: str | None
    text: str | None
    number: int | float | None
    bucket: int | None
    offset: int | None
    value: int | float | str | None
    records: int


def aggregate_groups(plan: AggregatePlan, rows: Rows) -> tuple[list[GroupRow], int]:
    """The groups shown, and the number of records in all groups."""
    total = int(rows[0]["total"]) if rows else 0
    groups: list[GroupRow] = []
    for row in rows:
        if plan.group_by is not None:
            part: dict[str, Any] = {
                "kind": str(row["g_kind"]),
                "text": row["g_text"],
                "number": _number(row["g_num"]),
                "bucket": None,
                "offset": None,
            }
        else:
            bucket = row["g_bucket"]
            offset = row["g_offset"] if plan.granularity == "hour" else None
            part = {
                "kind": None,
                "text": None,
                "number": None,
                "bucket": None if bucket is None else int(bucket),
                "offset": None if offset is None else int(offset),
            }
        groups.append(GroupRow(**part, value=_value(plan, row), records=int(row["records"])))
    return groups, total
