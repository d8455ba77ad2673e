"""Aggregate statements (docs/contract.md §12): a stream's visible records counted, summed,
ranged and grouped in SQL, over the comparable values the write path stores (`field_values`,
`tables` Rule 8). No row of the stream reaches Python: only the answer's few rows do.

Rules:
1. Every statement reads `records` under the grant's visibility (`visibility.visible_records`)
   and the filter's condition (`filters.filter_condition`); the fields aggregated or grouped are
   joined by key (their own value, `element` 0) with an outer join, so a record without the field
   still counts, in the group whose key is null.
2. Numbers are `num` (exact NUMERIC), instants `instant`, strings and booleans `text` (folded,
   `stored_text`). A sum is the exact sum of the numbers' shortest decimals (what Postgres's
   NUMERIC holds), the same on every database. Where the database sums NUMERIC exactly
   (`Capabilities.sums_exactly`) it is `sum(num)`. Elsewhere (SQLite keeps a non-integral
   number as a double) it is computed in integers, in SQL: each double's decimal scale
   (`_scale`: the fewest places whose mantissa below 2**53 divides back to the double; for 17
   significant digits, the nearest mantissa by an exact two-product), its mantissa split
   into an integer part (two 32-bit halves) and 22 decimal places (two limbs of 11), and the
   four summed: no SUM can overflow below 2**31 numbers (a limb sum: 9.2e7). Groups are
   ordered by the parts carried into one canonical form (`_exact_order`), so exactly. Exact
   for every number whose shortest decimal has at most 22 places and is below 2**53 unless
   whole, save 16 digits with a mantissa of 2**53 or more (its nearest 17-digit decimal is
   summed); beyond, a double's own value, to 10**-22.
3. Time buckets (`_core.aggregates` rule 5) are integer arithmetic on the instant's text: its
   date and time read by position (`YYYY-MM-DDTHH:MM:SS`), the date counted in days since
   0000-03-01 (the civil-days algorithm, integers only), the zone's offset chosen by a balanced
   tree of comparisons with the bound offset changes. The parsing and the arithmetic each run once
   per record, in inner selects fenced with `OFFSET 0`, so no database inlines them into each use.
4. Grouped answers are ordered in SQL (largest value first, ties by key; time buckets oldest
   first, the null bucket last), cut to `limit`, and carry the number of records in all groups
   (a window sum over the groups), from which the operation tells `other_count`.
5. A count by group under a grant whose terms are connection and stream only, with no filter,
   reads the counts the write path keeps per value (`value_counts`, `tables` Rule 11: one row
   per distinct value, not one index entry per record) for a `group_by` field, or the
   grouping field's comparable rows alone for time buckets (`ix_field_values_groups`), and the
   number of visible records from `ix_records_live`, in one statement (`_by_values`): one
   snapshot, so the null group (visible records less the keyed groups) is consistent.
6. There, time buckets are counted as ranges of the field's own instants where the ranges are
   few (`_core.aggregates` rule 7): each range one search and walk of
   `ix_field_values_own_instants`, the counts added per bucket; with the instants found outside
   the ranges (`ranges_missed`: written since the range was read), the operation asks again
   per span. Otherwise per span (`_core.aggregates` rule 6).
7. Statements are built once per shape (`_statement_key`: what their text depends on) and
   dialect, everything else bound, so a repeated aggregate costs no build and no compile.
8. A filter with an equality clause drives the statement from that clause's rows in its value
   index (`_source`), not from every visible record; under Rule 5's grants without reading
   `records` at all (the clause's rows are live records' rows).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import Any, ClassVar

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Numeric,
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
    union_all,
)
from sqlalchemy.types import NullType

from pdpp_store._core.aggregates import END_INSTANT, FIRST_INSTANT, BucketRange, OffsetChanges
from pdpp_store._core.filters import Equals, Filter, Has, OneOf
from pdpp_store._core.grants import StreamGrant

from . import visibility
from .dialects import Capabilities, bound_rows
from .filters import clause_rows, filter_condition
from .requests import Execute, Row, Rows
from .tables import field_values, records, value_counts
from .visibility import grant_terms, same_record

__all__ = [
    "AggregatePlan",
    "GroupRow",
    "aggregate",
    "aggregate_groups",
    "aggregate_value",
    "exact_sum",
    "instant_range",
    "instant_span",
    "ranges_missed",
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
    by_values: bool = False
    """Rule 5: the groups are counted over the grouping field's comparable rows alone."""
    ranges: tuple[BucketRange, ...] | None = None
    """Rule 6: with `by_values`, time buckets counted as these ranges of the instants' index
    (`_core.aggregates.bucket_ranges`); None: per span."""


def counts_by_values(metric: str, grant: StreamGrant, filter: Filter) -> bool:
    """Whether a grouped count may read the grouping field's comparable rows alone (Rule 5):
    a count, under a grant whose terms are connection and stream only, with no filter."""
    return metric == "count" and _values_only(grant, filter)


def _values_only(grant: StreamGrant, filter: Filter) -> bool:
    """Rule 5's condition on the grant and the filter: the field's comparable rows are exactly
    the visible records' (connection and stream are the grant's only terms; no filter)."""
    return visibility.values_suffice(grant_terms(grant)[0]) and not filter.clauses


def _kind(table: Any, name: str) -> ColumnElement[bool]:
    return table.c.kind == literal_column(f"'{name}'")  # type: ignore[no-any-return]


def _value_join(table: Any, param: str, key: Any = records) -> ColumnElement[bool]:
    return and_(same_record(table, key), table.c.path == bindparam(param), table.c.element == 0)


def _where(grant: StreamGrant, connection_id: str | None, filter: Filter) -> tuple[Any, ...]:
    shape, _ = grant_terms(grant)
    only = grant.instance_ids is not None and len(grant.instance_ids) == 1
    visible = visibility.visible_records(shape, only="a_only" if only else None)
    conditions: list[ColumnElement[bool]] = [visible]
    if connection_id is not None:
        conditions.append(records.c.connection_id == bindparam("a_conn"))
    if filter:
        conditions.append(filter_condition(filter, records))
    return tuple(conditions)


def _own_rows(
    table: Any,
    grant: StreamGrant,
    connection_id: str | None,
    param: str,
    *,
    own_value: bool = True,
) -> tuple[Any, ...]:
    """Rule 5: the comparable rows of the field bound as `param`, their own value (`element`
    0), of the records the grant admits (`visibility.visible_values`); or, not `own_value`, the
    field's rows of `value_counts` (its own values already, counted). Where one connection is
    read, it is named by equality: the index is then read in its own order (an `IN` list
    leaves a planner to sort what it groups), and its ends found without a walk."""
    only = grant.instance_ids is not None and len(grant.instance_ids) == 1
    conditions = [
        visibility.visible_values(grant_terms(grant)[0], table, only="a_only" if only else None),
        table.c.path == bindparam(param),
    ]
    if own_value:
        conditions.append(table.c.element == literal_column("0"))
    if connection_id is not None:
        conditions.append(table.c.connection_id == bindparam("a_conn"))
    return tuple(conditions)


def _params(grant: StreamGrant, connection_id: str | None, plan: AggregatePlan) -> dict[str, Any]:
    params = dict(grant_terms(grant)[1])
    params.update(_connection_params(grant, connection_id))
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
    if plan.ranges is not None:
        params["a_ranges"] = json.dumps([[r.start, r.end, r.bucket, r.offset] for r in plan.ranges])
        params["a_low"] = plan.ranges[0].start if plan.ranges else FIRST_INSTANT
        params["a_high"] = plan.ranges[-1].end if plan.ranges else FIRST_INSTANT
    return params


# ---------------------------------------------------------------- the range of instants


def instant_range(
    grant: StreamGrant, connection_id: str | None, filter: Filter, path: str
) -> Execute:
    """The lowest and highest instant of `path` among the visible records (decoded by
    `instant_span`): the range the zone's offsets are computed over. Where the grant and filter
    allow (Rule 5), over the field's comparable rows alone: two ends of its instant index."""
    grouped = field_values.alias("a_grouped")
    low, high = func.min(grouped.c.instant), func.max(grouped.c.instant)
    ends = select(low.label("low"), high.label("high"))
    statement: Any
    if _values_only(grant, filter):
        # each end alone in its branch (`ix_field_values_own_instants`: one search each; with
        # both, SQLite walks the range between them)
        rows = (
            *_own_rows(grouped, grant, connection_id, "a_group"),
            grouped.c.instant.is_not(None),
        )
        nothing = cast(null(), Text)
        statement = union_all(
            select(low.label("low"), nothing.label("high")).where(*rows),
            select(nothing.label("low"), high.label("high")).where(*rows),
        )
    else:
        source, key, conditions = _source(grant, connection_id, filter)
        joined = source.join(grouped, _value_join(grouped, "a_group", key))
        statement = ends.select_from(joined).where(*conditions)
    params = dict(grant_terms(grant)[1])
    params["a_group"] = path
    params.update(_connection_params(grant, connection_id))
    return Execute(statement, params)


def _source(
    grant: StreamGrant, connection_id: str | None, filter: Filter
) -> tuple[Any, Any, tuple[Any, ...]]:
    """Rule 1's visible matching records as (what to select from, the table whose key names
    them, the conditions). A filter with an equality clause (`eq`, `in`, `has`) is driven by
    that clause's rows in its value index (`clause_rows`: at most one per record), the rest of
    the filter checked per match, not every visible record checked against the filter. Under
    a grant whose terms are connection and stream only (Rule 5), the clause's rows stand for
    their records (`visible_values`), so `records` is not read at all; otherwise each match is
    joined to its record by key, under `visible_records`."""
    driving = next((c for c in filter.clauses if isinstance(c, Equals | OneOf | Has)), None)
    if driving is None:
        return records, records, _where(grant, connection_id, filter)
    rest = Filter(tuple(clause for clause in filter.clauses if clause is not driving))
    drive = field_values.alias("a_drive")
    shape = grant_terms(grant)[0]
    only = grant.instance_ids is not None and len(grant.instance_ids) == 1
    conditions: list[Any] = [clause_rows(driving, drive)]
    if connection_id is not None:
        conditions.append(drive.c.connection_id == bindparam("a_conn"))
    if visibility.values_suffice(shape):
        visible = visibility.visible_values(shape, drive, only="a_only" if only else None)
        if rest.clauses:
            conditions.append(filter_condition(rest, drive))
        return drive, drive, (visible, *conditions)
    conditions.append(drive.c.stream == bindparam("g_stream"))
    if only:
        conditions.append(drive.c.connection_id == bindparam("a_only"))
    source = drive.join(records, same_record(drive, records))
    return source, records, (*_where(grant, connection_id, rest), *conditions)


def _connection_params(grant: StreamGrant, connection_id: str | None) -> dict[str, str]:
    """The connection read (`a_conn`), and the grant's one connection when it names one
    (`a_only`, Rule 5's equality)."""
    params = {}
    if connection_id is not None:
        params["a_conn"] = connection_id
    if grant.instance_ids is not None and len(grant.instance_ids) == 1:
        params["a_only"] = grant.instance_ids[0]
    return params


def instant_span(rows: Rows) -> tuple[str, str] | None:
    lows = [str(row["low"]) for row in rows if row["low"] is not None]
    highs = [str(row["high"]) for row in rows if row["high"] is not None]
    if not lows or not highs:
        return None
    return min(lows), max(highs)


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


def _utc_days(parsed: Any, offsets: OffsetChanges) -> list[Any]:
    """A parsed instant (`_parsed`'s columns) as its UTC day number, second of the day, offset
    and whether it is inside the bucketed range."""
    instant = parsed.c.g_instant
    days = _days_from_civil(parsed.c.g_year, parsed.c.g_month, parsed.c.g_day)
    inside = and_(instant >= bindparam("a_first"), instant < bindparam("a_end"))
    return [
        days.label("g_udays"),
        parsed.c.g_clock.label("g_clock"),
        _offset_tree(instant, 0, len(offsets.changes)).label("g_tree"),
        case((inside, 1), else_=0).label("g_inside"),
    ]


def _local_seconds(dated: Any) -> list[Any]:
    """(local seconds since 0000-03-01, offset) of `_utc_days`' columns; null outside the
    bucketed range."""
    inside = dated.c.g_inside == 1
    local = dated.c.g_udays * 86400 + dated.c.g_clock + dated.c.g_tree
    return [
        case((inside, local), else_=null()).label("g_local"),
        case((inside, dated.c.g_tree), else_=null()).label("g_offset"),
    ]


def _bucketed(rows: Any, granularity: str) -> Any:
    """The rows with their bucket number `g_bucket` (and `g_offset`), Rule 3: the civil-from-
    days steps each in a fenced select, so each value is computed once per record (written as
    one expression, each step repeats the ones before it: over a hundred divisions)."""

    def step(source: Any, name: str, *columns: Any) -> Any:
        names = {column.name for column in columns} | {"g_local", "g_days"}
        kept = [column for column in source.c if column.name not in names]
        return select(*kept, *columns).offset(0).subquery(name)

    if granularity == "hour":
        return step(rows, "a_rows", (rows.c.g_local // 3600).label("g_bucket"))
    days = step(rows, "a_days", (rows.c.g_local // 86400).label("g_days"))
    day = days.c.g_days
    if granularity in ("day", "week"):
        bucket = day if granularity == "day" else (day + 2) // 7
        return step(days, "a_rows", bucket.label("g_bucket"))
    era = step(
        days,
        "a_era",
        (day // 146097).label("g_era"),
        (day - (day // 146097) * 146097).label("g_doe"),
    )
    doe = era.c.g_doe
    year_of_era = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    years = step(era, "a_years", year_of_era.label("g_yoe"))
    yoe = years.c.g_yoe
    day_of_year = years.c.g_doe - (yoe * 365 + yoe // 4 - yoe // 100)
    march = step(years, "a_march", ((day_of_year * 5 + 2) // 153).label("g_mp"))
    mp = march.c.g_mp
    month = case((mp < 10, mp + 3), else_=mp - 9)
    year = march.c.g_yoe + march.c.g_era * 400 + case((mp >= 10, 1), else_=0)
    months = year * 12 + month - 1
    bucket = months if granularity == "month" else months // 12
    return step(march, "a_rows", bucket.label("g_bucket"))


# ---------------------------------------------------------------- the statement


def _raw(column: Any) -> Any:
    """A column read as the driver gives it (a NUMERIC as `Decimal`, no result conversion)."""
    return type_coerce(column, NullType())


def _metric(plan: AggregatePlan, caps: Capabilities, rows: Any) -> list[Any]:
    """The metric's columns over the inner rows (`m_kind`, `m_num`, `m_text`, `m_instant`)."""
    if plan.metric == "count":
        if "p_records" in rows.c:
            return [func.sum(rows.c.p_records).label("value")]
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
    return [
        func.sum(rows.c.s_qhi).label("sum_qhi"),
        func.sum(rows.c.s_qlo).label("sum_qlo"),
        *(func.sum(rows.c[f"s_f{j}"]).label(f"sum_f{j}") for j in range(1, _LIMBS + 1)),
    ]


MAX_SCALE = 22
"""The most decimal places a number is summed exactly at where NUMERIC sums are not exact
(Rule 2): 10**22 is the largest power of ten a double holds exactly."""

_LIMB = 10**6
_LIMBS = 4
"""A fraction's 22 decimal places are kept in four integers (limbs) of 6 places each."""


def _power(scale: int) -> Any:
    return bindparam(f"a_p{scale}", float(10**scale), type_=NullType())


def _scale(num: Any) -> Any:
    """The fewest decimal places (1..`MAX_SCALE`) of a non-integral double's shortest decimal
    (Python's `repr`, what Postgres stores in `num`); 0 for an integer; -1 where no scale gives
    an integer mantissa below 2**53; null for anything but a number. At scale k the mantissa
    M = round(num * 10**k) is the decimal's, exactly, when M below 2**53 divided by the exact
    10**k gives `num` back (IEEE division rounds once, as reading the decimal does)."""
    whens: list[Any] = [(func.typeof(num) == literal("integer"), 0)]
    for scale in range(1, MAX_SCALE + 1):
        scaled = num * _power(scale)
        fits = and_(func.abs(scaled) < 2.0**53, func.round(scaled) / _power(scale) == num)
        whens.append((fits, scale))
    return case((num.is_(None), null()), *whens, else_=-1)


def _by_scale(scale: Any, value: Any) -> Any:
    """A constant per scale 1..`MAX_SCALE` (`value(k)`), chosen by the row's scale."""
    return case({k: literal(value(k)) for k in range(1, MAX_SCALE + 1)}, value=scale)


def _split(value: float) -> tuple[float, float]:
    """Veltkamp's split of a double into two of 26 bits each (their sum is exact)."""
    c = 134217729.0 * value
    high = c - (c - value)
    return high, value - high


def _digits17(num: Any) -> Any:
    """The scale at which a double between 1e-6 and 2**53 has 17 significant digits (null
    elsewhere): where its shortest decimal has 17, it is the nearest one at that scale."""
    whens = [(func.abs(num) >= float(10 ** (16 - k)), k) for k in range(1, 17)]
    whens += [(func.abs(num) >= 10.0 ** (16 - k), k) for k in range(17, MAX_SCALE + 1)]
    return case((func.abs(num) >= 2.0**53, null()), *whens, else_=null())


def _nearest_mantissa(num: Any, scale: Any) -> Any:
    """round(num * 10**scale) exactly, for `_digits17`'s scales: the product in two doubles
    (Dekker's two-product over Veltkamp's split; every step of IEEE arithmetic exact), the
    first a whole number (it is above 2**53), the second rounded to the nearest integer."""
    power = _by_scale(scale, lambda k: float(10**k))
    power_high = _by_scale(scale, lambda k: _split(float(10**k))[0])
    power_low = _by_scale(scale, lambda k: _split(float(10**k))[1])
    spread = num * literal(134217729.0)
    num_high = spread - (spread - num)
    num_low = num - num_high
    product = num * power
    error = (num_high * power_high - product) + num_high * power_low + num_low * power_high
    error = error + num_low * power_low
    whole_error = cast(error, BigInteger)
    rest = error - whole_error
    nudge = case((rest > 0.5, 1), (rest < -0.5, -1), else_=0)
    return cast(product, BigInteger) + whole_error + nudge


def _mantissas(num: Any, scale: Any) -> list[Any]:
    """A number's scale and its exact decimal mantissa at it (Rule 2): the scale `_scale` found,
    or for a double whose shortest decimal has 17 significant digits, `_digits17`'s; -1 and
    null where neither holds (a double with more than 22 decimal places, or beyond 2**53)."""
    found = case((scale == -1, func.coalesce(_digits17(num), -1)), else_=scale)
    mantissa = case(
        (scale > 0, cast(func.round(num * _by_scale(scale, lambda k: float(10**k))), BigInteger)),
        (scale == -1, _nearest_mantissa(num, _digits17(num))),
        else_=null(),
    )
    return [found.label("m_scale"), mantissa.label("m_mantissa"), num.label("m_number")]


def _limb(fraction: Any, scale: Any, j: int) -> Any:
    """Places 6j-5..6j of a fraction `fraction` * 10**-scale, as an integer with its sign."""

    def divisor(k: int) -> int:  # the fraction's places after the limb's last
        return int(10 ** max(k - 6 * j, 0))

    def shift(k: int) -> int:  # the places the limb lacks after the fraction's last
        return int(10 ** min(max(6 * j - k, 0), 6))  # (a limb past them all is 0: `keep` is 1)

    def keep(k: int) -> int:  # the fraction's places up to the limb's last
        return int(10 ** min(max(k - 6 * (j - 1), 0), 6))

    return ((fraction // _by_scale(scale, divisor)) % _by_scale(scale, keep)) * _by_scale(
        scale, shift
    )


def _parts(num: Any, scale: Any, mantissa: Any) -> list[Any]:
    """A number as four integers the sum adds without overflow (Rule 2): its integer part
    in a high and a low 32-bit half, and its fraction's 22 decimal places in two limbs of 11
    (each in -10**11..10**11, with the number's sign). Exact for every number with a scale; the
    others are split as doubles (the integer part, then the fraction's places by products)."""
    unit = _by_scale(scale, lambda k: 10 ** min(k, 18))  # |mantissa| < 10**17
    whole = mantissa // unit  # truncated: the fraction keeps the mantissa's sign
    fraction = mantissa % unit
    limbs = [_limb(fraction, scale, j) for j in range(1, _LIMBS + 1)]
    truncated = cast(num, BigInteger)
    floor = truncated - case((num < truncated, 1), else_=0)
    rest = num - floor  # in 0..1, a double: its places by successive products
    rests = []
    for _ in range(_LIMBS):
        rest = rest * literal(float(_LIMB))
        place = cast(rest, BigInteger)
        rests.append(place)
        rest = rest - place
    integer = case((scale == 0, num), (scale > 0, whole), else_=floor)
    big = and_(scale == -1, func.abs(num) >= 2.0**62)  # a double beyond SQL's integers
    big_high = cast(num / literal(4294967296.0), BigInteger)
    big_low = cast(num - big_high * literal(4294967296.0), BigInteger)
    return [
        case((big, big_high), else_=integer.op(">>")(32)).label("s_qhi"),
        case((big, big_low), else_=integer.op("&")(4294967295)).label("s_qlo"),
        *(
            case((scale == 0, 0), (scale > 0, limb), (big, 0), else_=rested).label(f"s_f{j}")
            for j, (limb, rested) in enumerate(zip(limbs, rests, strict=True), start=1)
        ),
    ]


def _inner(
    plan: AggregatePlan,
    caps: Capabilities,
    grant: StreamGrant,
    connection_id: str | None,
    filter: Filter,
) -> Any:
    joined, key, where = _source(grant, connection_id, filter)
    columns: list[Any] = [key.c.record_id.label("r_id")]
    if plan.field is not None:
        measured = field_values.alias("a_measured")
        joined = joined.outerjoin(measured, _value_join(measured, "a_field", key))
        columns += [
            measured.c.kind.label("m_kind"),
            measured.c.num.label("m_num"),
            measured.c.text.label("m_text"),
            measured.c.instant.label("m_instant"),
        ]
    if plan.group_by is not None or plan.group_by_time is not None:
        grouped = field_values.alias("a_grouped")
        joined = joined.outerjoin(grouped, _value_join(grouped, "a_group", key))
        if plan.group_by is not None:
            columns += [
                func.coalesce(grouped.c.kind, literal("null")).label("g_kind"),
                grouped.c.text.label("g_text"),
                _raw(grouped.c.num).label("g_num"),
            ]
        elif _in_spans(plan):
            spans = (
                select(*_span_columns(grouped.c.instant))
                .select_from(joined)
                .where(*where)
                .group_by(_span(grouped.c.instant, plan))
                .subquery("a_spans")
            )
            return _time_steps(plan, select(spans.c.p_records, *_parsed(spans.c.p_instant)))
        else:
            columns += _parsed(grouped.c.instant)
    statement = select(*columns).select_from(joined).where(*where)
    if plan.metric == "sum" and not caps.sums_exactly:
        # Rule 2: each number's scale found once, then its parts, each step fenced
        number = case((measured.c.kind == literal("number"), measured.c.num), else_=null())
        statement = select(*columns, _scale(number).label("m_scale"), number.label("m_number"))
        statement = statement.select_from(joined).where(*where)
        scaled = statement.offset(0).subquery("a_measures")
        own = ("m_scale", "m_number", "m_mantissa")
        kept = [column for column in scaled.c if column.name not in own]
        found = select(*kept, *_mantissas(scaled.c.m_number, scaled.c.m_scale))
        mantissas = found.offset(0).subquery("a_mantissas")
        kept = [column for column in mantissas.c if column.name not in own]
        parts = _parts(mantissas.c.m_number, mantissas.c.m_scale, mantissas.c.m_mantissa)
        statement = select(*kept, *parts).offset(0)
    if plan.group_by_time is None:
        return statement.subquery("a_rows")
    return _time_steps(plan, statement)


def _in_spans(plan: AggregatePlan) -> bool:
    """Whether time buckets are counted per span of instants (`_core.aggregates` rule 6)."""
    return plan.metric == "count" and plan.group_by_time is not None


def _span(instant: Any, plan: AggregatePlan) -> Any:
    """The span an instant lies in: its first `uniform_prefix` characters."""
    assert plan.offsets is not None
    length: Any = literal_column(str(plan.offsets.uniform_prefix))
    return func.substr(instant, literal_column("1"), length)


def _span_columns(instant: Any) -> list[Any]:
    """A span's instant (any one of it buckets them all: its least) and its records."""
    return [func.min(instant).label("p_instant"), func.count().label("p_records")]


def _time_steps(plan: AggregatePlan, statement: Any) -> Any:
    """Rule 3's steps over rows carrying `_parsed`'s columns, each fenced."""
    assert plan.offsets is not None
    # Rule 3: each step fenced, so no database inlines the text's parsing into the arithmetic
    parsed = statement.offset(0).subquery("a_parsed")
    kept = [column for column in parsed.c if not column.name.startswith("g_")]
    dated = select(*kept, *_utc_days(parsed, plan.offsets)).offset(0).subquery("a_dated")
    kept = [column for column in dated.c if not column.name.startswith("g_")]
    stepped = select(*kept, *_local_seconds(dated)).offset(0).subquery("a_local")
    return _bucketed(stepped, plan.granularity)


def _largest_first(plan: AggregatePlan, caps: Capabilities, metric: list[Any]) -> list[Any]:
    """Groups by their value, largest first: a sum of nothing is 0, a min or max of nothing
    (null) comes last. Where sums are built from parts (Rule 2), they are ordered by the parts
    added as a double: exact while sums stay within 2**53, else by the nearest doubles."""
    if plan.metric == "sum":
        if caps.sums_exactly:
            return [func.coalesce(metric[0].element, 0).desc()]
        return _exact_order([column.element for column in metric])
    value = metric[0].element
    return [case((value.is_(None), 1), else_=0), value.desc()]


def _exact_order(sums: list[Any]) -> list[Any]:
    """Rule 2's parts of a sum (`sum_qhi`, `sum_qlo`, `sum_f1`..`sum_f4`) carried into one
    canonical form (a signed high half, then a low half in 0..2**32, then four limbs in
    0..10**6), ordered largest first: exact whatever the sums' size."""
    high, low, *places = (func.coalesce(part, 0) for part in sums)
    limb = literal(_LIMB)

    def floor_div(number: Any) -> Any:  # SQL's integer division truncates
        return (number - (number % limb + limb) % limb) // limb

    carried = list(places)
    for j in range(len(carried) - 1, 0, -1):
        carried[j - 1] = carried[j - 1] + floor_div(carried[j])
    carried_low = low + floor_div(carried[0])
    return [
        (high + carried_low.op(">>")(32)).desc(),
        carried_low.op("&")(4294967295).desc(),
        *(((place % limb + limb) % limb).desc() for place in carried),
    ]


class _Built:
    """Statements built (Rule 7), by `_statement_key` and dialect; emptied when full. Its
    `cache_clear` is a `functools` cache's: what empties the builders' caches empties it."""

    KEPT = 256
    _statements: ClassVar[dict[tuple[Any, ...], Any]] = {}

    @classmethod
    def get(cls, key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        found = cls._statements.get(key)
        if found is None:
            found = build()
            if len(cls._statements) >= cls.KEPT:
                cls._statements.clear()
            cls._statements[key] = found
        return found

    @classmethod
    def cache_clear(cls) -> None:
        cls._statements.clear()


def _statement_key(
    plan: AggregatePlan, grant: StreamGrant, connection_id: str | None, filter: Filter
) -> tuple[Any, ...]:
    """Everything an aggregate statement's text depends on (Rule 7): the plan less what is
    bound (field names, offsets and ranges, but for the number of offset changes and the
    spans' prefix), the grant's shape, whether it names one connection, whether one connection
    is asked for, and the filter (its values are in the statement)."""
    offsets = plan.offsets
    named = replace(
        plan,
        field=None if plan.field is None else "",
        group_by=None if plan.group_by is None else "",
        group_by_time=None if plan.group_by_time is None else "",
        offsets=None,
        ranges=None if plan.ranges is None else (),
    )
    steps = None if offsets is None else (len(offsets.changes), offsets.uniform_prefix)
    one = grant.instance_ids is not None and len(grant.instance_ids) == 1
    return (named, steps, grant_terms(grant)[0], one, connection_id is not None, filter)


def aggregate(
    plan: AggregatePlan, grant: StreamGrant, connection_id: str | None, filter: Filter
) -> Execute:
    """The aggregate (decoded by `aggregate_value` or, grouped, `aggregate_groups`), built
    once per `_statement_key` and dialect (Rule 7)."""
    params = _params(grant, connection_id, plan)
    key = _statement_key(plan, grant, connection_id, filter)

    def cached(caps: Capabilities) -> Any:
        return _Built.get((*key, caps.name), lambda: build(caps))

    def build(caps: Capabilities) -> Any:
        if plan.by_values:
            return _by_values(plan, caps, grant, connection_id, filter)
        rows = _inner(plan, caps, grant, connection_id, filter)
        metric = _metric(plan, caps, rows)
        if plan.group_by is None and plan.group_by_time is None:
            return select(*metric).select_from(rows)
        records_in = func.sum(rows.c.p_records) if "p_records" in rows.c else func.count()
        total = func.sum(records_in).over().label("total")
        if plan.group_by is not None:
            keys = [rows.c.g_kind, rows.c.g_text, rows.c.g_num]
            ordering = _largest_first(plan, caps, metric)
            ordering += [rows.c.g_kind, rows.c.g_text, rows.c.g_num]
            return (
                select(*keys, *metric, records_in.label("records"), total)
                .group_by(*keys)
                .order_by(*ordering)
                .limit(plan.limit)
            )
        keys = _bucket_keys(plan, rows)
        return (
            select(*keys, *metric, records_in.label("records"), total)
            .group_by(*keys)
            .order_by(*_bucket_order(plan, rows))
            .limit(plan.limit)
        )

    return Execute(cached, params)


def _bucket_keys(plan: AggregatePlan, rows: Any) -> list[Any]:
    """A time bucket's key columns: its number, and for an hour its offset."""
    return [rows.c.g_bucket] + ([rows.c.g_offset] if plan.granularity == "hour" else [])


def _bucket_order(plan: AggregatePlan, rows: Any) -> list[Any]:
    """Oldest bucket first, the null bucket last; an hour repeated by a DST change earlier
    (its larger offset) first."""
    bucket = rows.c.g_bucket
    ordering = [case((bucket.is_(None), 1), else_=0), bucket]
    if plan.granularity == "hour":
        ordering.append(rows.c.g_offset.desc())
    return ordering


def _by_values(
    plan: AggregatePlan,
    caps: Capabilities,
    grant: StreamGrant,
    connection_id: str | None,
    filter: Filter,
) -> Any:
    """Rule 5: a count by group over the grouping field's comparable rows alone: the groups
    with a key (a comparable form other than null; for time, a bucketed instant), ordered
    (`place`) and cut in SQL, with the number of records in all of them (`total`); then one row
    with the number of visible records (`visible`, one count over `records`); for time buckets
    counted as ranges (Rule 6), two more with the number of instants before and after the
    ranges (`outside`). The group whose key is null holds the difference, and `aggregate_groups`
    places it. One statement, so one snapshot for every count; branches of a `UNION ALL`, each
    reading one table (no statement joins record tables but by `connection_id`)."""
    own = field_values.alias("a_grouped")
    rows = _own_rows(own, grant, connection_id, "a_group")
    if plan.group_by is not None:
        kept = value_counts.alias("a_kept")
        number = _kind(kept, "number")
        groups = (
            select(
                kept.c.kind.label("g_kind"),
                case((number, null()), else_=kept.c.text).label("g_text"),
                _raw(case((number, kept.c.num), else_=null())).label("g_num"),
                func.sum(kept.c.records).label("p_records"),
            )
            .where(*_own_rows(kept, grant, connection_id, "a_group", own_value=False))
            .group_by(kept.c.kind, kept.c.text, kept.c.num)
            .subquery("a_groups")
        )
        keys: list[Any] = [groups.c.g_kind, groups.c.g_text, groups.c.g_num]
        ordering = [groups.c.p_records.desc(), *keys]
        empty: list[Any] = [cast(null(), Text), cast(null(), Text), cast(null(), Numeric)]
    elif plan.ranges is not None:
        groups = _ranged_groups(plan, caps, own, rows)
        keys = _bucket_keys(plan, groups)
        ordering = _bucket_order(plan, groups)[1:]
        empty = [cast(null(), BigInteger) for _ in keys]
    else:
        spans = (
            select(*_span_columns(own.c.instant))
            .where(*rows, own.c.instant.is_not(None))
            .group_by(_span(own.c.instant, plan))
            .subquery("a_spans")
        )
        bucketed = _time_steps(plan, select(spans.c.p_records, *_parsed(spans.c.p_instant)))
        grouping = _bucket_keys(plan, bucketed)
        groups = (
            select(*grouping, func.sum(bucketed.c.p_records).label("p_records"))
            .where(bucketed.c.g_bucket.is_not(None))
            .group_by(*grouping)
            .subquery("a_groups")
        )
        keys = _bucket_keys(plan, groups)
        ordering = _bucket_order(plan, groups)[1:]
        empty = [cast(null(), BigInteger) for _ in keys]
    size = groups.c.p_records
    keyed = (
        select(
            *keys,
            size.label("value"),
            size.label("records"),
            func.sum(size).over().label("total"),
            func.row_number().over(order_by=ordering).label("place"),
            cast(null(), BigInteger).label("visible"),
            cast(null(), BigInteger).label("outside"),
        )
        .order_by(*ordering)
        .limit(plan.limit)
    )
    counted = select(
        *(column.label(key.name) for column, key in zip(empty, keys, strict=True)),
        *(cast(null(), BigInteger).label(name) for name in ("value", "records", "total", "place")),
        func.count().label("visible"),
        cast(null(), BigInteger).label("outside"),
    ).where(*_where(grant, connection_id, filter))
    branches = [select(keyed.subquery("a_keyed")), counted.select_from(records)]
    if plan.ranges is not None:
        nothing = [*(null_key.label(key.name) for null_key, key in zip(empty, keys, strict=True))]
        nothing += [cast(null(), BigInteger).label(name) for name in _COUNTS]
        for low, high in (("a_first", "a_low"), ("a_high", "a_end")):
            outside = _outside(own, rows, low, high).label("outside")
            branches.append(select(*nothing, outside))
    return union_all(*branches)


_COUNTS = ("value", "records", "total", "place", "visible")


def _ranged_groups(plan: AggregatePlan, caps: Capabilities, own: Any, rows: tuple[Any, ...]) -> Any:
    """Rule 6: time buckets with their records, each range (`plan.ranges`, bound as one JSON
    parameter) counted in the field's own instants' index (`ix_field_values_own_instants`: a
    search and a walk, no row read), the ranges' counts added per bucket."""
    hour = plan.granularity == "hour"
    columns = [("r_start", True), ("r_end", True), ("r_bucket", False)]
    ranges = bound_rows(caps, "a_ranges", (*columns, *([("r_offset", False)] if hour else [])))
    inside = (
        select(func.count())
        .where(
            *rows,
            own.c.instant.is_not(None),
            own.c.instant >= ranges.c.r_start,
            own.c.instant < ranges.c.r_end,
        )
        .scalar_subquery()
    )
    keys = [ranges.c.r_bucket.label("g_bucket")]
    if hour:
        keys.append(ranges.c.r_offset.label("g_offset"))
    # fenced: each range counted once (inlined, Postgres counted it again for the `HAVING`)
    counted = select(*keys, inside.label("p_records")).offset(0).subquery("a_counted")
    grouping = [counted.c.g_bucket] + ([counted.c.g_offset] if hour else [])
    size = func.sum(counted.c.p_records)
    return (
        select(*grouping, size.label("p_records"))
        .group_by(*grouping)
        .having(size > 0)
        .subquery("a_groups")
    )


def _outside(own: Any, rows: tuple[Any, ...], low: str, high: str) -> Any:
    """Rule 6: the field's own instants from `low` to `high`, bound: before the ranges (from
    `FIRST_INSTANT`) or after them (to `END_INSTANT`), written since their range was read. A
    range of the index, empty as a rule; each in a branch of its own, one table per branch."""
    instant = own.c.instant
    return (
        select(func.count())
        .where(*rows, instant.is_not(None), instant >= bindparam(low), instant < bindparam(high))
        .scalar_subquery()
    )


def ranges_missed(plan: AggregatePlan, rows: Rows) -> bool:
    """Whether a count by time bucket as ranges (Rule 6) saw instants outside its ranges: its
    answer would misplace them, and the operation asks again per span."""
    if plan.ranges is None:
        return False
    return any(int(row["outside"] or 0) > 0 for row in rows)


# ---------------------------------------------------------------- decoding


def _number(value: Any) -> int | float | None:
    if value is None:
        return None
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return int(value) if isinstance(value, int) else float(value)


def exact_sum(row: Row) -> Decimal:
    """A sum as the statement's row holds it, exactly: NUMERIC's own, or (Rule 2) its parts:
    the integer parts' halves and the fractions' two limbs of 11 decimal places."""
    if "sum_qhi" not in row:
        found = row["value"]
        if found is None:
            return Decimal(0)
        return Decimal(repr(found)) if isinstance(found, float) else Decimal(found)
    whole = int(row["sum_qhi"] or 0) * 4294967296 + int(row["sum_qlo"] or 0)
    fraction = 0
    for j in range(1, _LIMBS + 1):
        fraction = fraction * _LIMB + int(row[f"sum_f{j}"] or 0)
    return _EXACT.add(Decimal(whole), Decimal(f"{fraction}e-{6 * _LIMBS}"))


_EXACT = Context(prec=MAX_PREC, Emin=MIN_EMIN, Emax=MAX_EMAX)
"""Decimal arithmetic that never rounds (the default context keeps 28 digits)."""


def _sum(row: Row) -> int | float:
    exact = exact_sum(row)
    return int(exact) if exact == exact.to_integral_value() else float(exact)


def _value(plan: AggregatePlan, row: Row) -> int | float | str | None:
    if plan.metric in ("count", "count_distinct"):
        return int(row["value"] or 0)
    if plan.metric == "sum":
        return _sum(row)
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


_KIND_ORDER = ("boolean", "null", "number", "string")
"""Kinds in the order their groups' keys sort (byte-wise, as the statement orders them)."""


def _with_null_group(plan: AggregatePlan, groups: list[GroupRow], size: int) -> list[GroupRow]:
    """Rule 5's keyed groups (ordered, at most `limit`) with the group whose key is null (of
    `size` records) where the statement would have ordered it, cut to `limit`: last for time
    buckets; for `group_by`, by its count, ties by key (the kind `null` sorts between
    `boolean` and `number`)."""
    if size <= 0:
        return groups
    null = GroupRow(
        "null" if plan.group_by is not None else None, None, None, None, None, size, size
    )
    place = len(groups)
    if plan.group_by is not None:

        def before(group: GroupRow) -> bool:
            if group.records != size:
                return group.records > size
            return _KIND_ORDER.index(str(group.kind)) < _KIND_ORDER.index("null")

        place = next((n for n, group in enumerate(groups) if not before(group)), len(groups))
    return [*groups[:place], null, *groups[place:]][: plan.limit]


def _place(row: Row) -> int:
    return int(row["place"])


def aggregate_groups(plan: AggregatePlan, rows: Rows) -> tuple[list[GroupRow], int]:
    """The groups shown, and the number of records in all groups."""
    if plan.by_values:
        visible = sum(int(row["visible"]) for row in rows if row["visible"] is not None)
        keyed = sorted((row for row in rows if row["place"] is not None), key=_place)
        grouped = int(keyed[0]["total"]) if keyed else 0
        found, _ = aggregate_groups(replace(plan, by_values=False), keyed)
        return _with_null_group(plan, found, visible - grouped), visible
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
