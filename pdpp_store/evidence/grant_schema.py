"""`GrantSchema`: what a grant lets an agent see, from the manifests alone (never a record).

Rules:
1. Per granted stream: the connections the grant covers that declare it, and the declared
   fields the grant covers (all declared fields under an owner grant), each with its declared
   JSON type, whether it is text-like (binary-only per the manifest: blob references, base64)
   and whether search looks at it (`query.search.lexical_fields` minus ungranted fields).
2. A stream the grant names but no covered connection declares is listed with no connections
   and no fields: the grant names it, the data does not exist.
3. What may be asked (docs/contract.md §11.3), under the grant: per granted field its filter
   operators (`filters`), the order field (`order.field`, null when the stream has none or the
   grant does not cover it: `query_records` then pages in key order), the declared aggregations
   naming granted fields only, and the views with their granted fields (a view left with none
   is not shown). Nothing names an ungranted field.
4. Figures, each over the records the grant can see and nothing else: `record_count`,
   `last_written_at` (the newest write of a visible record, ISO-8601 UTC, null when none) and
   `order.oldest`/`order.newest` (the order field's least and greatest instant or number among
   them; null when the field is not granted or no visible record holds one).
5. The streams come a page at a time, in name order (docs/decisions.md, "`describe_grant` a
   page at a time"): `has_more` says whether the grant names streams after the page, and `next`
   is the ready `describe_grant` call that lists them (None on the last page).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from ._schema import card, embedded, nullable
from .continuation import Continuation

__all__ = ["FieldSchema", "GrantSchema", "StreamOrder", "StreamSchema"]

_NAMES: dict[str, Any] = {"type": "array", "items": {"type": "string"}}
_BOUND: dict[str, Any] = {"type": ["string", "number", "null"]}


@dataclass(frozen=True, slots=True)
class FieldSchema:
    path: str
    json_type: str
    text_like: bool
    searchable: bool
    role: str | None = None
    """The field's declared `x_pdpp_role`, if any."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "FieldSchema",
        {
            "path": {"type": "string"},
            "type": {"type": "string"},
            "text_like": {"type": "boolean"},
            "searchable": {"type": "boolean"},
            "role": {"type": ["string", "null"]},
        },
        ["path", "type", "text_like", "searchable", "role"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "type": self.json_type,
            "text_like": self.text_like,
            "searchable": self.searchable,
            "role": self.role,
        }


@dataclass(frozen=True, slots=True)
class StreamOrder:
    """The field `query_records` orders by, when granted, and its bounds among visible records."""

    field: str | None = None
    oldest: str | int | float | None = None
    newest: str | int | float | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "StreamOrder",
        {"field": {"type": ["string", "null"]}, "oldest": _BOUND, "newest": _BOUND},
        ["field", "oldest", "newest"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "oldest": self.oldest, "newest": self.newest}


@dataclass(frozen=True, slots=True)
class StreamSchema:
    name: str
    connection_ids: tuple[str, ...]
    fields: tuple[FieldSchema, ...]
    filters: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Per granted field, the filter operators it takes (`_core.filters.filter_operators`)."""
    order: StreamOrder = dataclasses.field(default_factory=StreamOrder)
    aggregations: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"count": False})
    """The declared aggregations (`Aggregations.to_json`), granted fields only."""
    views: tuple[Mapping[str, Any], ...] = ()
    """The declared views (`View.to_json`), granted fields only."""
    record_count: int = 0
    last_written_at: str | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "StreamSchema",
        {
            "object": {"const": "stream"},
            "name": {"type": "string"},
            "connection_ids": _NAMES,
            "searchable_fields": _NAMES,
            "fields": {"type": "array", "items": embedded(FieldSchema.JSON_SCHEMA)},
            "filters": {"type": "object", "additionalProperties": _NAMES},
            "order": embedded(StreamOrder.JSON_SCHEMA),
            "aggregations": {
                "type": "object",
                "required": ["count"],
                "properties": {"count": {"type": "boolean"}},
                "additionalProperties": _NAMES,
            },
            "views": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "label", "fields"],
                    "properties": {
                        "id": {"type": "string"},
                        "label": {"type": ["string", "null"]},
                        "fields": _NAMES,
                    },
                    "additionalProperties": False,
                },
            },
            "record_count": {"type": "integer", "minimum": 0},
            "last_written_at": {"type": ["string", "null"]},
        },
        [
            "object",
            "name",
            "connection_ids",
            "searchable_fields",
            "fields",
            "filters",
            "order",
            "aggregations",
            "views",
            "record_count",
            "last_written_at",
        ],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": "stream",
            "name": self.name,
            "connection_ids": list(self.connection_ids),
            "searchable_fields": [f.path for f in self.fields if f.searchable],
            "fields": [f.to_dict() for f in self.fields],
            "filters": {name: list(ops) for name, ops in self.filters.items()},
            "order": self.order.to_dict(),
            "aggregations": dict(self.aggregations),
            "views": [dict(view) for view in self.views],
            "record_count": self.record_count,
            "last_written_at": self.last_written_at,
        }


@dataclass(frozen=True, slots=True)
class GrantSchema:
    grant_id: str
    streams: tuple[StreamSchema, ...]
    next: Continuation | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "GrantSchema",
        {
            "object": {"const": "grant_schema"},
            "grant_id": {"type": "string"},
            "streams": {"type": "array", "items": embedded(StreamSchema.JSON_SCHEMA)},
            "has_more": {"type": "boolean"},
            "next": nullable(embedded(Continuation.JSON_SCHEMA)),
        },
        ["object", "grant_id", "streams", "has_more", "next"],
    )

    @property
    def has_more(self) -> bool:
        return self.next is not None

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": "grant_schema",
            "grant_id": self.grant_id,
            "streams": [s.to_dict() for s in self.streams],
            "has_more": self.has_more,
            "next": None if self.next is None else self.next.to_dict(),
        }
