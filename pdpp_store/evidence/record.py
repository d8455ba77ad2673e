"""`RecordView` and `FieldPreview`: a record projected under a grant (docs/contract.md §5).

Rules:
1. Only granted fields appear. A text-like value up to the preview bound is shown whole in `data`
   (`complete`); a longer one is cut to the bound (`truncated`): text shows its preview in
   `data`, JSON only in its ladder entry, never as a half-parsed value. Metadata-only fields
   (`binary-only`) show metadata, never bytes.
2. Every field not shown whole has a `content_ladder` entry: its `FieldInfo`, its
   `preview_status`, and for truncated text the `read` continuation, the `read_field_window` call
   (and its resource URI) that reads on from the end of the preview.
3. A projection is bounded whatever the record's width: it shows at most a page of granted
   fields in path order (`has_more_fields` and the `next` continuation, a `read_record` call
   with `after_field`, give the rest), and at most a budget of code points of their values; a
   text-like field past the budget is `unavailable`, with its metadata and the `read` of its
   first window (see `pdpp_store._ops.reads.RECORD_MAX_FIELDS`, `RECORD_BUDGET_CHARS`).
4. `revision` identifies the granted content (a digest of the granted fields' paths, kinds and
   digests): it changes exactly when something the grant covers changes. The record's own
   `version` counts every change, so it is shown only under a grant of all fields; under a
   narrower one it would tell that an ungranted field changed. On a record wider than one page,
   `revision` covers the fields of the page shown.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache
from json.encoder import encode_basestring_ascii as _json_string
from operator import attrgetter
from typing import Any, ClassVar, Literal

from pdpp_store._core.fields import FieldKind
from pdpp_store._core.identity import FieldWindowRef, RecordRef
from pdpp_store._core.slots import slot_setters
from pdpp_store._core.window import DEFAULT_LIMIT_CHARS

from ._schema import card as card_schema
from ._schema import embedded, nullable
from .card import RecordCard
from .continuation import Continuation
from .field import FieldInfo

__all__ = ["FieldPreview", "RecordView"]
"""`built_preview` and `built_view` are the library's own, for its hot paths: not exported."""

PreviewStatus = Literal["complete", "truncated", "binary-only", "unavailable"]


def _preview_schema() -> dict[str, Any]:
    info = FieldInfo.JSON_SCHEMA
    return card_schema(
        "FieldPreview",
        {
            **embedded(info)["properties"],
            "preview_status": {"enum": ["complete", "truncated", "binary-only", "unavailable"]},
            "preview_chars": {"type": "integer", "minimum": 1},
            "item_count": {"type": "integer", "minimum": 0},
            "preview": {"type": "string"},
            "read": embedded(Continuation.JSON_SCHEMA),
        },
        [*info["required"], "preview_status"],
        allOf=[
            *embedded(info)["allOf"],
            {
                "if": {"properties": {"preview_status": {"const": "truncated"}}},
                "then": {"required": ["preview_chars", "read"]},
                "else": {"not": {"required": ["preview_chars"]}},
            },
            {
                "if": {"properties": {"preview_status": {"enum": ["truncated", "unavailable"]}}},
                "then": {"required": ["read"]},
                "else": {"not": {"required": ["read"]}},
            },
        ],
    )


@dataclass(frozen=True, slots=True)
class FieldPreview:
    """One field of a projected record, as `read_record` shows it; `to_dict()` is its ladder
    entry."""

    record: RecordRef
    info: FieldInfo
    status: PreviewStatus
    value: Any = None  # the whole value when complete; the preview text when truncated text
    preview: str | None = None
    item_count: int | None = None

    JSON_SCHEMA: ClassVar[dict[str, Any]] = _preview_schema()

    def __post_init__(self) -> None:
        if (self.status == "truncated") != (self.preview is not None):
            raise ValueError("a preview is given exactly when the value is truncated")
        if (self.status == "binary-only") == self.info.text_like:
            raise ValueError("a field is binary-only exactly when it is metadata-only")

    @property
    def read(self) -> Continuation | None:
        """How to read on: from the end of the preview (truncated values), or from the start
        (values past the projection's budget)."""
        if self.status not in ("truncated", "unavailable"):
            return None
        offset = len(self.preview) if self.preview is not None else 0
        return _read_on(self.record, self.info.path, offset)

    @property
    def shown_chars(self) -> int:
        """The code points of the value this preview shows (whole, or its preview)."""
        if self.status == "complete":
            return self.info.size_chars
        return len(self.preview) if self.preview is not None else 0

    @property
    def shown_in_data(self) -> bool:
        """Whether `data` holds this field: whole, or the preview of truncated text (rule 1)."""
        return self.status == "complete" or (
            self.status == "truncated" and self.info.kind is FieldKind.TEXT
        )

    def to_dict(self) -> dict[str, Any]:
        info, status, preview = self.info, self.status, self.preview
        out = info.to_dict()
        out["preview_status"] = status
        if preview is not None:
            out["preview_chars"] = len(preview)
            if info.kind is FieldKind.JSON:
                out["preview"] = preview
        if status in {"truncated", "unavailable"}:  # `read`, spelled out
            if self.item_count is not None:
                out["item_count"] = self.item_count
            offset = len(preview) if preview is not None else 0
            out["read"] = _read_on(self.record, info.path, offset).to_dict()
        return out


@lru_cache(maxsize=1024)
def _read_on(record: RecordRef, path: str, offset: int) -> Continuation:
    """The window read at `offset` of a field, once per field and offset (a continuation is an
    immutable value; projections of the same records come back again and again)."""
    return Continuation.read_window(FieldWindowRef(record, path, offset, DEFAULT_LIMIT_CHARS))


_PATH = attrgetter("path")


@dataclass(frozen=True, slots=True)
class RecordView:
    """A record projected under a grant: granted fields only, long values as previews."""

    ref: RecordRef
    version: int | None
    fields: tuple[FieldPreview, ...]
    after_field: str | None = None
    """The path this page of fields starts after (None: the first page)."""
    next_after_field: str | None = None
    """The path the next page starts after; None when this page holds the last field."""
    only: tuple[str, ...] | None = None
    """The fields the projection was narrowed to (`fields`), kept by the next page."""
    card: RecordCard | None = None
    """The record's card (docs/contract.md §13): its identity and declared-role slots."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card_schema(
        "RecordView",
        {
            "object": {"const": "record"},
            "id": {"type": "string"},
            "uri": {"type": "string", "pattern": "^pdpp://record/"},
            "connection_id": {"type": "string"},
            "stream": {"type": "string"},
            "record_id": {"type": "string"},
            "revision": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "version": {"type": "integer", "minimum": 1},
            "data": {"type": "object"},
            "content_ladder": {
                "type": "object",
                "additionalProperties": embedded(FieldPreview.JSON_SCHEMA),
            },
            "after_field": {"type": ["string", "null"]},
            "fields": {"type": "array", "items": {"type": "string"}},
            "has_more_fields": {"type": "boolean"},
            "next": nullable(embedded(Continuation.JSON_SCHEMA)),
            "card": embedded(RecordCard.JSON_SCHEMA),
        },
        [
            "object",
            "id",
            "uri",
            "connection_id",
            "stream",
            "record_id",
            "revision",
            "data",
            "content_ladder",
            "after_field",
            "has_more_fields",
            "next",
        ],
    )

    @property
    def next(self) -> Continuation | None:
        """The projection of the next page of fields, when the record is wider than this one."""
        return None if self.next_after_field is None else self._next()

    def _next(self) -> Continuation:
        arguments: dict[str, Any] = {
            "record": self.ref.argument,
            "after_field": self.next_after_field,
        }
        if self.only is not None:
            arguments["fields"] = list(self.only)
        return Continuation("read_record", arguments)

    @property
    def revision(self) -> str:
        return _revision([item.info for item in self.fields])

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        ladder: dict[str, Any] = {}
        infos = []
        for item in self.fields:  # one pass: the data, and a ladder entry for all but complete
            info, status = item.info, item.status
            infos.append(info)
            if status == "complete":  # `shown_in_data`, spelled out
                data[info.path] = item.value
                continue
            if status == "truncated" and info.kind is FieldKind.TEXT:
                data[info.path] = item.value
            ladder[info.path] = item.to_dict()
        ref = self.ref
        return {
            "object": "record",
            "id": ref.id,
            "uri": ref.uri,
            "connection_id": ref.connection_id,
            "stream": ref.stream,
            "record_id": ref.record_id,
            "revision": _revision(infos),
            **({"version": self.version} if self.version is not None else {}),
            "data": data,
            "content_ladder": ladder,
            "after_field": self.after_field,
            **({"fields": list(self.only)} if self.only is not None else {}),
            "has_more_fields": self.next_after_field is not None,
            "next": None if self.next_after_field is None else self._next().to_dict(),
            **({"card": self.card.to_dict()} if self.card is not None else {}),
        }


def _revision(infos: list[FieldInfo]) -> str:
    """`RecordView.revision` of fields with these infos (in any order): each field hashes as
    `json.dumps([path, kind, digest])` (default separators, ASCII), in path order; the JSON text
    is spelled here, string by string, by json's own encoder (`_hashed_field`). The digest of
    a small record's fields is remembered (`_REVISIONS`)."""
    pieces = tuple(
        [_hashed_field(info.path, info.kind, info.digest) for info in sorted(infos, key=_PATH)]
    )
    revision = _REVISIONS.get(pieces)
    if revision is None:
        hashed = "".join(pieces)
        revision = "sha256:" + hashlib.sha256(hashed.encode()).hexdigest()
        if len(hashed) <= _REVISION_KEPT_CHARS:
            if len(_REVISIONS) >= _REVISIONS_KEPT:
                _REVISIONS.clear()
            _REVISIONS[pieces] = revision
    return revision


_REVISIONS: dict[tuple[str, ...], str] = {}
"""Revisions by what they hash (a pure function of it), for fields whose hashed text is at most
`_REVISION_KEPT_CHARS`: at most `_REVISIONS_KEPT` of them (then it starts again), so a few MB."""
_REVISIONS_KEPT = 1024
_REVISION_KEPT_CHARS = 4096


@lru_cache(maxsize=1024)
def _hashed_field(path: str, kind: str, digest: str) -> str:
    """What the revision hashes of one field, once per field state (projections of the same
    records come back again and again): `json.dumps([path, kind, digest])`."""
    return f"[{_json_string(path)}, {_json_string(kind)}, {_json_string(digest)}]"


_NEW = object.__new__
(_SET_RECORD, _SET_INFO, _SET_STATUS, _SET_VALUE, _SET_PREVIEW, _SET_ITEM_COUNT) = slot_setters(
    FieldPreview, ("record", "info", "status", "value", "preview", "item_count")
)
(_SET_REF, _SET_VERSION, _SET_FIELDS, _SET_AFTER, _SET_NEXT_AFTER, _SET_ONLY, _SET_CARD) = (
    slot_setters(
        RecordView, ("ref", "version", "fields", "after_field", "next_after_field", "only", "card")
    )
)


def built_preview(  # noqa: PLR0917 - the fields of `FieldPreview`, in its order
    record: RecordRef,
    info: FieldInfo,
    status: PreviewStatus,
    value: Any = None,
    preview: str | None = None,
    item_count: int | None = None,
) -> FieldPreview:
    """`FieldPreview(...)` without its checks (`_core.slots`), for a caller that holds its rules by
    construction (`read_record`, one per field of every projection)."""
    item: FieldPreview = _NEW(FieldPreview)
    _SET_RECORD(item, record)
    _SET_INFO(item, info)
    _SET_STATUS(item, status)
    _SET_VALUE(item, value)
    _SET_PREVIEW(item, preview)
    _SET_ITEM_COUNT(item, item_count)
    return item


def built_view(  # noqa: PLR0917 - the fields of `RecordView`, in its order
    ref: RecordRef,
    version: int | None,
    fields: tuple[FieldPreview, ...],
    after_field: str | None,
    next_after_field: str | None,
    only: tuple[str, ...] | None,
    card: RecordCard | None = None,
) -> RecordView:
    """`RecordView(...)` built as `built_preview` is (a view has no checks to skip)."""
    view: RecordView = _NEW(RecordView)
    _SET_REF(view, ref)
    _SET_VERSION(view, version)
    _SET_FIELDS(view, fields)
    _SET_AFTER(view, after_field)
    _SET_NEXT_AFTER(view, next_after_field)
    _SET_ONLY(view, only)
    _SET_CARD(view, card)
    return view
