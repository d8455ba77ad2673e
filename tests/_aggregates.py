"""Test material for aggregates: a manifest declaring every aggregation, and the Python oracle
(`expected`) that answers an aggregate from the records themselves, independently of the SQL:
visibility from the grant's terms, values from `_core.filters.comparable`, time buckets from
`zoneinfo` (`datetime.astimezone`), sums in exact `Decimal` of each number's shortest decimal
(never rounded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, Context, Decimal
from typing import Any
from zoneinfo import ZoneInfo

from pdpp_store import StreamGrant
from pdpp_store._core.filters import Filter, comparable, matches, stored_text
from pdpp_store._core.grants import normalize_instant

__all__ = ["AGG_MANIFEST", "CONNECTOR", "STREAM", "Question", "exact_sum", "expected"]

STREAM = "events"
CONNECTOR = "https://example.com/connectors/aggregates"
AGG_MANIFEST: dict[str, Any] = {
    "connector_id": CONNECTOR,
    "streams": [
        {
            "name": STREAM,
            "primary_key": ["id"],
            "cursor_field": "when",
            "schema": {
                "properties": {
                    "id": {"type": "string"},
                    "when": {"type": "string", "format": "date-time"},
                    "n": {"type": "number"},
                    "flag": {"type": ["boolean", "null"]},
                    "label": {"type": "string"},
                    "tags": {"type": "array"},
                    "secret": {"type": "string"},
                }
            },
            "query": {
                "range_filters": {"n": ["gt", "lte"], "when": ["gte", "lt"]},
                "aggregations": {
                    "count": True,
                    "sum": ["n"],
                    "min": ["n", "when"],
                    "max": ["n", "when"],
                    "count_distinct": ["label", "n"],
                    "group_by": ["label", "flag", "n", "tags"],
                    "group_by_time": ["when"],
                },
            },
        }
    ],
}

FIRST_INSTANT = "0001-01-02T00:00:00.000000Z"
END_INSTANT = "9999-12-31T00:00:00.000000Z"
_KIND_ORDER = {"boolean": 0, "null": 1, "number": 2, "string": 3}


@dataclass(frozen=True)
class Question:
    metric: str = "count"
    field: str | None = None
    group_by: str | None = None
    group_by_time: str | None = None
    granularity: str = "month"
    time_zone: str = "UTC"
    limit: int = 25

    def arguments(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "field": self.field,
            "group_by": self.group_by,
            "group_by_time": self.group_by_time,
            "granularity": self.granularity,
            "time_zone": self.time_zone,
            "limit": self.limit,
        }


def visible(grant: StreamGrant, connection_id: str, record: Mapping[str, Any]) -> bool:
    """The grant's terms over one live record (docs/contract.md §2), in Python."""
    if not grant.covers_connection(connection_id):
        return False
    if grant.resources is not None and record["id"] not in grant.resources:
        return False
    time = grant.time_constraint
    if time is not None:
        value = record.get(time.field)
        instant = normalize_instant(value) if isinstance(value, str) else None
        if instant is None:
            return False
        if time.since is not None and instant < time.since:
            return False
        if time.until is not None and instant >= time.until:
            return False
    return True


def _own(record: Mapping[str, Any], name: str) -> Any:
    """The comparable form of a field's own value, or None (missing, array, object, none)."""
    if name not in record or isinstance(record[name], list | dict):
        return None
    return comparable(record[name])


def _exact(value: int | float) -> Decimal:
    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


_UNROUNDED = Context(prec=MAX_PREC, Emin=MIN_EMIN, Emax=MAX_EMAX)


def exact_sum(values: Iterable[Decimal]) -> Decimal:
    """The sum of decimals, never rounded (Python's default context keeps 28 digits)."""
    total = Decimal(0)
    for value in values:
        total = _UNROUNDED.add(total, value)
    return total


def _shown_instant(instant: str) -> str:
    return instant[:19] + "Z" if instant.endswith(".000000Z") else instant


def _offset_text(seconds: int) -> str:
    sign = "-" if seconds < 0 else "+"
    minutes, rest = divmod(abs(seconds), 60)
    return f"{sign}{minutes // 60:02d}:{minutes % 60:02d}" + (f":{rest:02d}" if rest else "")


def bucket_of(instant: str | None, granularity: str, zone: ZoneInfo) -> str | None:
    if instant is None or not FIRST_INSTANT <= instant < END_INSTANT:
        return None
    moment = datetime.strptime(instant, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    local = moment.astimezone(zone)
    if granularity == "hour":
        offset = local.utcoffset()
        assert offset is not None
        return f"{local:%Y-%m-%dT%H}:00" + _offset_text(int(offset.total_seconds()))
    day = local.date()
    if granularity == "day":
        return day.isoformat()
    if granularity == "week":
        return (day - timedelta(days=day.weekday())).isoformat()
    if granularity == "month":
        return f"{day.year:04d}-{day.month:02d}"
    return f"{day.year:04d}"


def _metric(question: Question, chosen: Sequence[Mapping[str, Any]]) -> Any:
    if question.metric == "count":
        return len(chosen)
    assert question.field is not None
    forms = [_own(record, question.field) for record in chosen]
    if question.metric == "count_distinct":
        return len({(f.kind, f.value) for f in forms if f is not None and f.kind != "null"})
    numbers = question.field == "n"
    if question.metric == "sum":
        total = exact_sum(_exact(f.value) for f in forms if f is not None and f.kind == "number")
        return int(total) if total == total.to_integral_value() else float(total)
    if numbers:
        values: list[Any] = [f.value for f in forms if f is not None and f.kind == "number"]
    else:
        values = [f.instant for f in forms if f is not None and f.instant is not None]
    if not values:
        return None
    found = min(values) if question.metric == "min" else max(values)
    return found if numbers else _shown_instant(found)


def _key(question: Question, record: Mapping[str, Any]) -> Any:
    if question.group_by is not None:
        form = _own(record, question.group_by)
        if form is None or form.kind == "null":
            return ("null", None)
        return (form.kind, form.value)
    assert question.group_by_time is not None
    form = _own(record, question.group_by_time)
    instant = form.instant if form is not None and form.kind == "string" else None
    zone = ZoneInfo(question.time_zone)
    return bucket_of(instant, question.granularity, zone)


def _key_order(key: tuple[str, Any]) -> tuple[Any, ...]:
    kind, value = key
    text = stored_text(value).encode() if kind == "string" else b""
    if kind == "boolean":
        text = b"true" if value else b"false"
    number = value if kind == "number" else 0
    return (_KIND_ORDER[kind], text, number)


def _bucket_order(key: str | None) -> tuple[Any, ...]:
    if key is None:
        return (1, datetime.min.replace(tzinfo=UTC))
    if "T" in key:
        return (0, datetime.fromisoformat(key))
    return (0, key)


def expected(
    question: Question,
    grant: StreamGrant,
    live: Sequence[tuple[str, Mapping[str, Any]]],
    filter: Filter,
) -> dict[str, Any]:
    """The answer `to_dict()` should give, less the groups' `query` calls."""
    chosen = [
        record for conn, record in live if visible(grant, conn, record) and matches(filter, record)
    ]
    head = {
        "object": "aggregate",
        "stream": STREAM,
        "metric": question.metric,
        "field": question.field,
    }
    if question.group_by is None and question.group_by_time is None:
        return {**head, "value": _metric(question, chosen)}
    groups: dict[Any, list[Mapping[str, Any]]] = {}
    for record in chosen:
        groups.setdefault(_key(question, record), []).append(record)
    answered = [(key, _metric(question, members), len(members)) for key, members in groups.items()]
    if question.group_by is not None:

        def order(item: tuple[Any, Any, int]) -> tuple[Any, ...]:
            key, value, _ = item
            if value is None:
                return (1, 0, _key_order(key))
            if isinstance(value, str):  # an instant: later first (normalised text sorts)
                full = value if len(value) == 27 else value[:19] + ".000000Z"
                return (0, tuple(-ord(c) for c in full), _key_order(key))
            return (0, -value, _key_order(key))

        answered.sort(key=order)
        shown_keys = [key[1] for key, _, _ in answered]
        extra: dict[str, Any] = {"group_by": question.group_by}
    else:
        answered.sort(key=lambda item: _bucket_order(item[0]))
        shown_keys = [key for key, _, _ in answered]
        extra = {
            "group_by_time": question.group_by_time,
            "granularity": question.granularity,
            "time_zone": question.time_zone,
        }
    cut = answered[: question.limit]
    groups_shown = [
        {"key": shown_keys[n], "value": value, "records": size}
        for n, (_, value, size) in enumerate(cut)
    ]
    other = sum(size for _, _, size in answered[question.limit :])
    return {**head, **extra, "groups": groups_shown, "other_count": other}
