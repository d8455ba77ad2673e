"""`RecordPage`: a page of a stream's records, as `query_records` lists them (docs/contract.md
§11.2).

Rules:
1. A row (`RecordRow`) is a record card (`RecordCard`: identity and declared-role slots) with
   the projected fields' values, each bounded like `read_record`'s previews (`FieldPreview`: a
   value up to the preview bound whole in `data`, a longer one cut with its `content_ladder`
   entry and the window read that goes on), and `read`, the `read_record` call that opens the
   whole record. A tombstone (`RecordTombstone`, changes pages only) is `{"id", "deleted":
   true}` with the record's key parts.
2. The page names its order: `order.field` is the field the rows are ordered by, or null when
   they are in key order (the grant does not cover the stream's order field, or the stream has
   none) or in change order (`order.by` says which of `field`, `key` or `change`).
3. `next` is the ready call that reads the next page (the same arguments, `cursor` set to
   `next_cursor`); None on the last page. `count` is there only when asked for;
   `next_changes_since` only on the last page of a changes walk.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pdpp_store._core.identity import RecordRef

from ._schema import card, embedded, nullable
from .card import RecordCard
from .continuation import Continuation
from .record import FieldPreview

__all__ = ["PageOrder", "RecordPage", "RecordRow", "RecordTombstone"]


def _row_schema() -> dict[str, Any]:
    base = RecordCard.JSON_SCHEMA
    return card(
        "RecordRow",
        {
            **embedded(base)["properties"],
            "data": {"type": "object"},
            "content_ladder": {
                "type": "object",
                "additionalProperties": embedded(FieldPreview.JSON_SCHEMA),
            },
            "read": embedded(Continuation.JSON_SCHEMA),
        },
        [*base["required"], "data", "content_ladder", "read"],
    )


@dataclass(frozen=True, slots=True)
class RecordRow:
    """One listed record: its card, its projected fields (previews) and how to open it."""

    card: RecordCard
    fields: tuple[FieldPreview, ...]

    JSON_SCHEMA: ClassVar[dict[str, Any]] = _row_schema()

    @property
    def ref(self) -> RecordRef:
        return self.card.ref

    @property
    def read(self) -> Continuation:
        """The `read_record` call that opens the whole record."""
        return Continuation("read_record", {"record": self.ref.argument}, self.ref.uri)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        ladder: dict[str, Any] = {}
        for item in self.fields:
            if item.shown_in_data:
                data[item.info.path] = item.value
            if item.status != "complete":
                ladder[item.info.path] = item.to_dict()
        return {
            **self.card.to_dict(),
            "data": data,
            "content_ladder": ladder,
            "read": self.read.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class RecordTombstone:
    """A record deleted since a changes bookmark (rule 1)."""

    ref: RecordRef

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "RecordTombstone",
        {
            "object": {"const": "record_tombstone"},
            "id": {"type": "string"},
            "connection_id": {"type": "string"},
            "stream": {"type": "string"},
            "record_id": {"type": "string"},
            "deleted": {"const": True},
        },
        ["object", "id", "connection_id", "stream", "record_id", "deleted"],
    )

    def to_dict(self) -> dict[str, Any]:
        ref = self.ref
        return {
            "object": "record_tombstone",
            "id": ref.id,
            "connection_id": ref.connection_id,
            "stream": ref.stream,
            "record_id": ref.record_id,
            "deleted": True,
        }


@dataclass(frozen=True, slots=True)
class PageOrder:
    """What a page is ordered by (rule 2)."""

    field: str | None
    direction: Literal["asc", "desc"]
    by: Literal["field", "key", "change"]

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "PageOrder",
        {
            "field": nullable({"type": "string"}),
            "direction": {"enum": ["asc", "desc"]},
            "by": {"enum": ["field", "key", "change"]},
        },
        ["field", "direction", "by"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "direction": self.direction, "by": self.by}


_COUNT_SCHEMA = {
    "type": "object",
    "required": ["kind", "value"],
    "properties": {"kind": {"const": "exact"}, "value": {"type": "integer", "minimum": 0}},
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class RecordPage:
    """A page of `query_records` (docs/contract.md §11.2)."""

    stream: str
    rows: tuple[RecordRow | RecordTombstone, ...]
    order: PageOrder
    next_cursor: str | None = None
    next: Continuation | None = None
    count: int | None = None
    """The number of visible records that match the filter, when `count="exact"` was asked."""
    next_changes_since: str | None = None
    """The bookmark to ask for the changes after this walk (last page of a changes walk)."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "RecordPage",
        {
            "object": {"const": "list"},
            "stream": {"type": "string"},
            "data": {
                "type": "array",
                "items": {
                    "anyOf": [
                        embedded(RecordRow.JSON_SCHEMA),
                        embedded(RecordTombstone.JSON_SCHEMA),
                    ]
                },
            },
            "has_more": {"type": "boolean"},
            "next_cursor": nullable({"type": "string"}),
            "next": nullable(embedded(Continuation.JSON_SCHEMA)),
            "order": embedded(PageOrder.JSON_SCHEMA),
            "count": _COUNT_SCHEMA,
            "next_changes_since": {"type": "string"},
        },
        ["object", "stream", "data", "has_more", "next_cursor", "next", "order"],
    )

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None

    @property
    def records(self) -> tuple[RecordRow, ...]:
        """The rows that are records (not tombstones)."""
        return tuple(row for row in self.rows if isinstance(row, RecordRow))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "object": "list",
            "stream": self.stream,
            "data": [row.to_dict() for row in self.rows],
            "has_more": self.has_more,
            "next_cursor": self.next_cursor,
            "next": None if self.next is None else self.next.to_dict(),
            "order": self.order.to_dict(),
        }
        if self.count is not None:
            out["count"] = {"kind": "exact", "value": self.count}
        if self.next_changes_since is not None:
            out["next_changes_since"] = self.next_changes_since
        return out
