"""Aggregates (docs/contract.md §12), their pure parts: the request's checks, and time buckets.
Pure: no I/O.

Rules:
1. Checks, in this order, each complete before the next begins: (a) shape, which depends on the
   request alone: `metric` one of `METRICS`, a `field` exactly when the metric is not `count`,
   at most one of `group_by` and `group_by_time`, `granularity` one of `GRANULARITIES`,
   `time_zone` an IANA zone this machine knows, `limit` 1..`MAX_GROUPS`; (b) grant: every field
   named (`field`, `group_by`, `group_by_time`) is granted, else `field_not_granted` (403) with
   that parameter; (c) declaration, against the stream's `query.aggregations`: the metric for
   that field (or `count: true`), the grouping field, else `invalid_aggregate` (400) naming the
   parameter. So a request about an ungranted field learns nothing of the manifest.
2. Values: `sum`, `min` and `max` read a field's numbers when its declared type admits numbers,
   else its instants (the normalised instants filters compare; `sum` takes numbers only);
   `count_distinct` counts distinct comparable non-null values (strings case-folded, `1` equal
   to `1.0`). Only a field's own value counts (`element` 0), never an array's elements.
3. Groups partition the records: a record whose grouping field is missing, null, an array or
   object, or has no comparable form (or, for time, no instant within `FIRST_INSTANT` ..
   `END_INSTANT`) is in the group whose key is null.
4. Time buckets are the zone's local hours, days, ISO weeks (from Monday), months or years. A
   local hour is keyed with its UTC offset (`2024-11-03T01:00-04:00`), so the hour a DST change
   repeats is two buckets, one per real hour; a day is `2024-03-10`, a week its Monday's date, a
   month `2024-03`, a year `2024`.
5. The SQL buckets an instant with integer arithmetic only: its UTC offset comes from the
   zone's offset changes over the answer's range, computed here (`offset_changes`) and bound as
   parameters; its local time is counted in seconds since 0000-03-01 (`day_number`), and the
   key is a whole number derived from that (`bucket_number`), turned into its text here
   (`bucket_key`). Both databases compute the same integers, so they agree exactly.
6. A count by time bucket is computed per span, not per record: instants sharing their first
   `OffsetChanges.uniform_prefix` characters (a UTC hour, minute or second) share their offset
   and, the offset being whole units, lie in one local hour, minute or second, so in one bucket
   of any granularity (buckets are whole local hours). The SQL counts each span's records,
   buckets one instant of each, and adds the counts.
7. Or, where the range holds few buckets, each bucket is counted as ranges of instants
   (`bucket_ranges`): the UTC instants where the bucket changes, found here from the zone's
   offsets, cut the range into consecutive ranges of one bucket each (the bucket number and,
   for an hour, its offset, as rule 5 numbers them). A bucket may own several ranges (a DST
   change that sets clocks back across a bucket's start); the SQL counts each range in the
   instants' index and adds the counts per bucket, with neither arithmetic nor a sort per
   record. The ranges start at the lowest instant and end just after the highest, so an instant
   the database holds outside them (written since the range was read) is seen, not misplaced.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from .errors import BadRequest, Forbidden, Unprocessable
from .filters import FieldScope
from .manifest import StreamSpec

__all__ = [
    "DEFAULT_GROUPS",
    "END_INSTANT",
    "FIRST_INSTANT",
    "GRANULARITIES",
    "MAX_BUCKET_RANGES",
    "MAX_GROUPS",
    "MAX_OFFSET_CHANGES",
    "METRICS",
    "AggregateRequest",
    "BucketRange",
    "FieldScope",
    "OffsetChanges",
    "bucket_bounds",
    "bucket_key",
    "bucket_ranges",
    "check_declared",
    "check_granted",
    "day_number",
    "format_instant",
    "offset_changes",
    "parse_request",
    "reads_numbers",
]

Metric = Literal["count", "sum", "min", "max", "count_distinct"]
Granularity = Literal["hour", "day", "week", "month", "year"]
METRICS: tuple[Metric, ...] = ("count", "sum", "min", "max", "count_distinct")
GRANULARITIES: tuple[Granularity, ...] = ("hour", "day", "week", "month", "year")
DEFAULT_GROUPS = 25
MAX_GROUPS = 100
MAX_ZONE_CHARS = 64
MAX_OFFSET_CHANGES = 1024
"""A zone changing its offset more often than this over the answer's range (about five
centuries of twice-yearly DST) is refused (`aggregate_range_too_wide`): each change is a bound
parameter of the statement."""

FIRST_INSTANT = "0001-01-02T00:00:00.000000Z"
END_INSTANT = "9999-12-31T00:00:00.000000Z"
"""Instants bucketed lie in [FIRST_INSTANT, END_INSTANT): a day's margin keeps every local time
(offsets are under 26 hours) within the years 1..9999 that both databases and Python count."""

LOCAL_EPOCH_DAYS_1970 = 719468
"""Days from 0000-03-01 to 1970-01-01: the day numbers `day_number` and the SQL count."""


def _invalid(message: str, param: str) -> BadRequest:
    return BadRequest("invalid_aggregate", message, param=param)


def _name(value: object, param: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\x00" in value or len(value) > 1024:
        raise _invalid(f"{param} must be a field name", param)
    try:
        value.encode()
    except UnicodeEncodeError:
        raise _invalid(f"{param} must be a field name", param) from None
    return value


def _zone(value: object) -> ZoneInfo:
    if not isinstance(value, str) or not value or len(value) > MAX_ZONE_CHARS:
        raise _invalid("time_zone must be an IANA time zone name, like Europe/Paris", "time_zone")
    try:
        return ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError, OSError, UnicodeError):
        raise _invalid(
            "time_zone must be an IANA time zone name, like Europe/Paris", "time_zone"
        ) from None


@dataclass(frozen=True, slots=True)
class AggregateRequest:
    metric: Metric
    field: str | None
    group_by: str | None
    group_by_time: str | None
    granularity: Granularity
    zone: ZoneInfo
    time_zone: str
    limit: int

    @property
    def named(self) -> tuple[tuple[str, str], ...]:
        """(parameter, field) for every field the request names, in parameter order."""
        pairs = (
            ("field", self.field),
            ("group_by", self.group_by),
            ("group_by_time", self.group_by_time),
        )
        return tuple((param, name) for param, name in pairs if name is not None)


def parse_request(
    metric: object,
    *,
    field: object,
    group_by: object,
    group_by_time: object,
    granularity: object,
    time_zone: object,
    limit: object,
) -> AggregateRequest:
    """The request's shape (rule 1a)."""
    if not isinstance(metric, str) or metric not in METRICS:
        raise _invalid(f"metric must be one of {', '.join(METRICS)}", "metric")
    name = _name(field, "field")
    if metric == "count" and name is not None:
        raise _invalid("metric count counts records and takes no field", "field")
    if metric != "count" and name is None:
        raise _invalid(f"metric {metric} needs a field", "field")
    grouped = _name(group_by, "group_by")
    timed = _name(group_by_time, "group_by_time")
    if grouped is not None and timed is not None:
        raise _invalid("give at most one of group_by and group_by_time", "group_by_time")
    if not isinstance(granularity, str) or granularity not in GRANULARITIES:
        raise _invalid(f"granularity must be one of {', '.join(GRANULARITIES)}", "granularity")
    zone = _zone(time_zone)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_GROUPS:
        raise BadRequest(
            "invalid_request", f"limit must be an integer between 1 and {MAX_GROUPS}", param="limit"
        )
    assert isinstance(time_zone, str)
    return AggregateRequest(
        metric,
        name,
        grouped,
        timed,
        granularity,
        zone,
        time_zone,
        limit,
    )


def check_granted(request: AggregateRequest, stream: str, scope: FieldScope) -> None:
    """Rule 1b."""
    for param, name in request.named:
        if not scope.allows_field(name):
            raise Forbidden(
                "field_not_granted",
                f"{param} {name!r}: the field is not granted for stream {stream!r}",
                param=param,
            )


def check_declared(request: AggregateRequest, specs: tuple[StreamSpec, ...], stream: str) -> None:
    """Rule 1c, against every manifest that declares the stream for a covered connection: a
    name is declared when each of them declares it (none: nothing is declared)."""

    def declared(kind: str, name: str | None = None) -> bool:
        if not specs:
            return False
        if name is None:
            return all(spec.aggregations.count for spec in specs)
        return all(name in spec.aggregations.fields_for(kind) for spec in specs)

    if request.metric == "count":
        if not declared("count"):
            raise _invalid(f"stream {stream!r} does not declare the count aggregation", "metric")
    elif not declared(request.metric, request.field):
        raise _invalid(
            f"stream {stream!r} does not declare {request.metric} of {request.field!r}", "field"
        )
    if request.group_by is not None and not declared("group_by", request.group_by):
        raise _invalid(
            f"stream {stream!r} does not declare group_by {request.group_by!r}", "group_by"
        )
    if request.group_by_time is not None and not declared("group_by_time", request.group_by_time):
        raise _invalid(
            f"stream {stream!r} does not declare group_by_time {request.group_by_time!r}",
            "group_by_time",
        )


def reads_numbers(specs: tuple[StreamSpec, ...], name: str) -> bool:
    """Rule 2: whether `sum`/`min`/`max` of `name` read numbers (else instants)."""
    return all(spec.declared[name].admits("integer") for spec in specs if name in spec.declared)


# ---------------------------------------------------------------- instants and offsets


def _parse_instant(instant: str) -> datetime:
    return datetime.strptime(instant, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def format_instant(moment: datetime) -> str:
    """A UTC moment as a normalised instant (`grants.normalize_instant`'s form)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").rjust(27, "0")


def _offset(zone: ZoneInfo, moment: datetime) -> int:
    delta = moment.astimezone(zone).utcoffset()
    assert delta is not None
    return int(delta.total_seconds())


@dataclass(frozen=True, slots=True)
class OffsetChanges:
    """The zone's UTC offset (seconds) from `first` on, and each later change: (the instant it
    takes effect, the offset from then on), in order."""

    first: int
    changes: tuple[tuple[str, int], ...]

    @property
    def uniform_prefix(self) -> int:
        """How many leading characters of a normalised instant (`YYYY-MM-DDTHH` 13, `..:MM`
        16, `..:SS` 19) name a span of time whose instants all fall in one bucket of every
        granularity (rule 6): the hour when every offset is whole hours and every change falls
        on a whole UTC hour, else the minute when the same holds of minutes, else the second
        (changes are found to the second, and buckets count whole seconds)."""
        offsets = (self.first, *(offset for _, offset in self.changes))
        for unit, length in ((3600, 13), (60, 16)):
            aligned = all(at[length:] == _ALIGNED[length:] for at, _ in self.changes)
            if aligned and all(offset % unit == 0 for offset in offsets):
                return length
        return 19


_ALIGNED = "0000-00-00T00:00:00.000000Z"
"""A normalised instant's shape with zeros: an instant whose characters after a prefix are
these lies on a whole unit (hour after 13, minute after 16)."""


def _first_change(zone: ZoneInfo, start: datetime, end: datetime) -> datetime:
    """The first whole second in (start, end] whose offset differs from start's (one exists)."""
    before = _offset(zone, start)
    low, high = start, end
    while high - low > timedelta(seconds=1):
        middle = low + (high - low) / 2
        middle = middle.replace(microsecond=0)
        if middle <= low:
            middle = low + timedelta(seconds=1)
        if _offset(zone, middle) == before:
            low = middle
        else:
            high = middle
    return high


def offset_changes(zone: ZoneInfo, lowest: str, highest: str) -> OffsetChanges:
    """The zone's offsets over [lowest, highest] (instants, clipped to the bucketed range):
    sampled a day apart, each change found to the second by bisection, several changes within a
    day found one after the other (a change undone within one day is not seen)."""
    start = _parse_instant(max(lowest, FIRST_INSTANT)).replace(microsecond=0)
    end = _parse_instant(min(highest, END_INSTANT))
    first = _offset(zone, start)
    changes: list[tuple[str, int]] = []
    at, current = start, first
    step = timedelta(days=1)
    while at < end:
        upto = min(at + step, end.replace(microsecond=0) + timedelta(seconds=1))
        while _offset(zone, upto) != current:
            change = _first_change(zone, at, upto)
            current = _offset(zone, change)
            changes.append((format_instant(change), current))
            if len(changes) > MAX_OFFSET_CHANGES:
                raise Unprocessable(
                    "aggregate_range_too_wide",
                    f"the records span more than {MAX_OFFSET_CHANGES} offset changes of "
                    f"time zone {zone.key!r}; narrow them with a filter, or use UTC",
                    param="time_zone",
                )
            at = change
        at = upto
    return OffsetChanges(first, tuple(changes))


# ---------------------------------------------------------------- bucket numbers and keys


def day_number(day: date) -> int:
    """Days from 0000-03-01 to `day` (the SQL's day numbers)."""
    return (day - date(1970, 1, 1)).days + LOCAL_EPOCH_DAYS_1970


def _day(number: int) -> date:
    return date(1970, 1, 1) + timedelta(days=number - LOCAL_EPOCH_DAYS_1970)


def _offset_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    minutes, rest = divmod(abs(seconds), 60)
    text = f"{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    return text + (f":{rest:02d}" if rest else "")


def bucket_key(granularity: str, number: int, offset: int | None) -> str:
    """The text of a bucket the SQL numbered (rule 4): hour numbers count local hours, day and
    week numbers local days (a week by its Monday), month numbers `year * 12 + month - 1`."""
    if granularity == "year":
        return f"{number:04d}"
    if granularity == "month":
        return f"{number // 12:04d}-{number % 12 + 1:02d}"
    if granularity == "week":
        return _day(number * 7 - 2).isoformat()
    if granularity == "day":
        return _day(number).isoformat()
    assert offset is not None
    day, hour = divmod(number, 24)
    return f"{_day(day).isoformat()}T{hour:02d}:00{_offset_text(offset)}"


def bucket_bounds(granularity: str, key: str, zone: ZoneInfo) -> tuple[str, str]:
    """The instants [start, end) of a bucket by its key: the first instant whose local time is
    in it and the first after it (a local midnight a DST change skips starts when it would)."""
    if granularity == "hour":
        start = datetime.fromisoformat(key)
        return format_instant(start), format_instant(start + timedelta(hours=1))
    if granularity == "year":
        first, after = date(int(key), 1, 1), (int(key) + 1, 1, 1)
    elif granularity == "month":
        year, month = int(key[:4]), int(key[5:7])
        first = date(year, month, 1)
        after = (year + month // 12, month % 12 + 1, 1)
    else:
        first = date.fromisoformat(key)
        last = first + timedelta(days=7 if granularity == "week" else 1)
        after = (last.year, last.month, last.day)

    def local(day: tuple[int, int, int]) -> str:
        if day[0] > 9999:
            return END_INSTANT
        return format_instant(datetime(*day, tzinfo=zone))

    return local((first.year, first.month, first.day)), local(after)


# ---------------------------------------------------------------- buckets as ranges of instants

MAX_BUCKET_RANGES = 2048
"""The most ranges a count by time bucket is counted in (rule 7); beyond (hours over months,
days over years), per span (rule 6). Each range is one search of the index, so this bounds the
searches whatever the records."""


@dataclass(frozen=True, slots=True)
class BucketRange:
    """The instants [start, end) that lie in one bucket (rule 7): its number as rule 5 numbers
    it, and for an hour its offset (None for other granularities)."""

    start: str
    end: str
    bucket: int
    offset: int | None


def _bucket_number(granularity: str, local: datetime) -> int:
    """Rule 5's number of the bucket holding local time `local`."""
    day = day_number(local.date())
    if granularity == "hour":
        return day * 24 + local.hour
    if granularity == "day":
        return day
    if granularity == "week":
        return (day + 2) // 7
    if granularity == "month":
        return local.year * 12 + local.month - 1
    return local.year


def _next_start(granularity: str, local: datetime) -> datetime:
    """The local time the bucket after `local`'s starts (OverflowError past the year 9999)."""
    if granularity == "hour":
        return local.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    day = local.date()
    if granularity == "day":
        day += timedelta(days=1)
    elif granularity == "week":
        day += timedelta(days=7 - day.weekday())
    elif granularity == "month":
        day = date(day.year + day.month // 12, day.month % 12 + 1, 1)
    else:
        day = date(day.year + 1, 1, 1)
    return datetime(day.year, day.month, day.day)


def _after(instant: str) -> str:
    """The next normalised instant (a microsecond later)."""
    return format_instant(_parse_instant(instant) + timedelta(microseconds=1))


def bucket_ranges(
    granularity: str, offsets: OffsetChanges, lowest: str, highest: str
) -> tuple[BucketRange, ...] | None:
    """Rule 7: the ranges of instants from `lowest` to just after `highest` (clipped to
    `FIRST_INSTANT`..`END_INSTANT`), consecutive, each in one bucket, found from `offsets`
    (`offset_changes` over the same instants); None when they are more than
    `MAX_BUCKET_RANGES`. A bucket's start is a whole local second and offsets whole seconds,
    so an instant's fraction never moves it across a range's end."""
    start = max(lowest, FIRST_INSTANT)
    end = min(_after(highest) if highest < END_INSTANT else END_INSTANT, END_INSTANT)
    if start >= end:
        return ()
    pieces = [(start, offsets.first)]
    pieces += [(at, offset) for at, offset in offsets.changes if start < at < end]
    found: list[tuple[str, int, int | None]] = []  # (start, bucket, offset), merged

    def add(at: str, local: datetime, offset: int) -> bool:
        key = (_bucket_number(granularity, local), offset if granularity == "hour" else None)
        if not found or found[-1][1:] != key:
            found.append((at, *key))
        return len(found) <= MAX_BUCKET_RANGES

    for number, (at, offset) in enumerate(pieces):
        until = pieces[number + 1][0] if number + 1 < len(pieces) else end
        shift = timedelta(seconds=offset)
        try:
            local = (_parse_instant(at) + shift).replace(tzinfo=None)
        except OverflowError:  # a local time past the year 9999: counted per span
            return None
        if not add(at, local, offset):
            return None
        try:
            following = _next_start(granularity, local)
            while (next_at := format_instant((following - shift).replace(tzinfo=UTC))) < until:
                if not add(next_at, following, offset):
                    return None
                following = _next_start(granularity, following)
        except OverflowError:  # no bucket starts before the year 10000
            pass
    ends = [at for at, _, _ in found[1:]] + [end]
    return tuple(
        BucketRange(at, until, bucket, offset)
        for (at, bucket, offset), until in zip(found, ends, strict=True)
    )
