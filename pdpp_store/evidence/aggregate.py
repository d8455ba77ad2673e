"""`AggregateResult`: one aggregate's answer (docs/contract.md §12).

Ungrouped: `{"object": "aggregate", "stream", "metric", "field", "value"}`. Grouped: the same
without `value`, with what it is grouped by (`group_by`, or `group_by_time` with its
`granularity` and `time_zone`), `groups` (each `{"key", "value", "records"}`, and the
`query_records` call that lists its records where a filter can say which they are) and
`other_count`, the records in the groups left out.

Rules:
1. Values are JSON numbers (exact integers where the answer is integral), instants as
   `YYYY-MM-DDTHH:MM:SS[.ffffff]Z` for `min`/`max` of a date-time field, or null (no value).
2. A key is the comparable form of the grouping value (a case-folded string, a number, a
   boolean) or the time bucket's text; null is the group of records without a value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ._schema import card, embedded, nullable
from .continuation import Continuation

__all__ = ["AggregateGroup", "AggregateResult"]

_SCALAR = {"type": ["string", "number", "boolean", "null"]}
_VALUE = {"type": ["string", "number", "null"]}
_COUNT = {"type": "integer", "minimum": 0}

Scalar = str | int | float | bool | None


@dataclass(frozen=True, slots=True)
class AggregateGroup:
    key: Scalar
    value: int | float | str | None
    records: int
    query: Continuation | None = None
    """The `query_records` call that lists the group's records, when a filter can name them."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "AggregateGroup",
        {
            "key": _SCALAR,
            "value": _VALUE,
            "records": _COUNT,
            "query": nullable(embedded(Continuation.JSON_SCHEMA)),
        },
        ["key", "value", "records", "query"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "value": self.value,
            "records": self.records,
            "query": None if self.query is None else self.query.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class AggregateResult:
    stream: str
    metric: str
    field: str | None
    value: int | float | str | None = None
    groups: tuple[AggregateGroup, ...] | None = None
    other_count: int = 0
    group_by: str | None = None
    group_by_time: str | None = None
    granularity: str | None = None
    time_zone: str | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "AggregateResult",
        {
            "object": {"const": "aggregate"},
            "stream": {"type": "string"},
            "metric": {"enum": ["count", "sum", "min", "max", "count_distinct"]},
            "field": nullable({"type": "string"}),
            "value": _VALUE,
            "group_by": {"type": "string"},
            "group_by_time": {"type": "string"},
            "granularity": {"enum": ["hour", "day", "week", "month", "year"]},
            "time_zone": {"type": "string"},
            "groups": {"type": "array", "items": embedded(AggregateGroup.JSON_SCHEMA)},
            "other_count": _COUNT,
        },
        ["object", "stream", "metric", "field"],
        oneOf=[
            {"required": ["value"], "not": {"required": ["groups"]}},
            {"required": ["groups", "other_count"], "not": {"required": ["value"]}},
        ],
    )

    @property
    def grouped(self) -> bool:
        return self.groups is not None

    def to_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "object": "aggregate",
            "stream": self.stream,
            "metric": self.metric,
            "field": self.field,
        }
        if self.groups is None:
            shown["value"] = self.value
            return shown
        if self.group_by is not None:
            shown["group_by"] = self.group_by
        else:
            shown["group_by_time"] = self.group_by_time
            shown["granularity"] = self.granularity
            shown["time_zone"] = self.time_zone
        shown["groups"] = [group.to_dict() for group in self.groups]
        shown["other_count"] = self.other_count
        return shown
