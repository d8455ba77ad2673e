"""`FieldWindow`: a bounded window of one text-like field; `to_dict()` is the envelope of
docs/contract.md §3.

Rules:
1. A window checks its own invariants when built: its text is exactly the slice
   `[start, start + limit)` of the field, clipped to the end, and a match lies within the field.
   Building one inconsistently raises `ValueError`: a bug in the store, not bad input.
2. Every derived key of the envelope (`total_chars`, `end_chars`, `complete`, `has_more`, the
   next and previous offsets) is computed from the fields below and nothing else, so the keys
   cannot disagree; `total_chars` is the field's own size.
3. `next` and `previous` are the `Continuation`s that read the neighbouring windows by their
   cursors; they exist exactly when the cursors do. `to_dict()` writes their cards itself from
   the names every continuation of the record's field shares (`cursor_window_names`, checked
   as the references check them): the JSON `Continuation.to_dict()` gives (tested).
4. A cursor may be given as `deferred_cursor(mint)`: it is minted when first read and kept, so
   the window is indistinguishable from one built with the token (equality, hash, repr,
   `to_dict()` and copies all read the token); a caller that wants only the text pays no MAC.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, NamedTuple

from pdpp_store._core.identity import (
    FieldWindowRef,
    RecordRef,
    cursor_window_names,
    cursor_window_uri,
)
from pdpp_store._core.slots import slot_setters
from pdpp_store._core.window import MAX_LIMIT_CHARS

from ._schema import card, embedded, nullable, warning_list
from .continuation import Continuation
from .field import FieldInfo

__all__ = ["FieldWindow", "deferred_cursor"]
"""`built_window` is the library's own, for its hot paths: not exported."""

_OFFSET = {"type": "integer", "minimum": 0}
_CURSOR = nullable({"type": "string", "minLength": 1})


class _Extent(NamedTuple):
    """Where a window ends and what lies beyond it (rule 2), computed in one place."""

    end: int
    complete: bool
    has_more: bool
    next_offset: int | None
    previous_offset: int | None


def _extent(total: int, start: int, limit: int, length: int) -> _Extent:
    end = min(start + length, total)
    return _Extent(
        end,
        start == 0 and end >= total,
        end < total,
        end if end < total else None,
        max(0, start - limit) if start > 0 else None,
    )


@dataclass(frozen=True, slots=True)
class FieldWindow:
    """A bounded window of one text-like field (see the module's rules)."""

    connection_id: str
    stream: str
    record_id: str
    field: FieldInfo
    text: str
    start_chars: int
    limit_chars: int
    match_start_chars: int | None = None
    match_end_chars: int | None = None
    next_cursor: str | None = None
    previous_cursor: str | None = None
    warnings: tuple[dict[str, str], ...] = ()
    next_match_cursor: str | None = None
    """On a match window: reads the next occurrence of the same `q` (null when none can exist:
    the match ends the field). Not proven to exist: reading it may be `query_not_found`."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "FieldWindow",
        {
            "object": {"const": "field_window"},
            "stream": {"type": "string"},
            "record_id": {"type": "string"},
            "connection_id": {"type": "string"},
            "field": embedded(FieldInfo.JSON_SCHEMA),
            "window": {
                "type": "object",
                "required": [
                    "text",
                    "total_chars",
                    "start_chars",
                    "end_chars",
                    "limit_chars",
                    "complete",
                    "has_more",
                    "match_start_chars",
                    "match_end_chars",
                    "next_offset_chars",
                    "previous_offset_chars",
                    "next_cursor",
                    "previous_cursor",
                    "next_match_cursor",
                ],
                "properties": {
                    "text": {"type": "string"},
                    "total_chars": _OFFSET,
                    "start_chars": _OFFSET,
                    "end_chars": _OFFSET,
                    "limit_chars": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT_CHARS},
                    "complete": {"type": "boolean"},
                    "has_more": {"type": "boolean"},
                    "match_start_chars": nullable(_OFFSET),
                    "match_end_chars": nullable(_OFFSET),
                    "next_offset_chars": nullable(_OFFSET),
                    "previous_offset_chars": nullable(_OFFSET),
                    "next_cursor": _CURSOR,
                    "previous_cursor": _CURSOR,
                    "next_match_cursor": _CURSOR,
                },
                "additionalProperties": False,
            },
            "next": nullable(embedded(Continuation.JSON_SCHEMA)),
            "previous": nullable(embedded(Continuation.JSON_SCHEMA)),
            "meta": {
                "type": "object",
                "required": ["warnings"],
                "properties": {"warnings": warning_list()},
                "additionalProperties": False,
            },
        },
        [
            "object",
            "stream",
            "record_id",
            "connection_id",
            "field",
            "window",
            "next",
            "previous",
            "meta",
        ],
    )

    def __post_init__(self) -> None:
        # Rule 1, from the fields themselves (the derived properties, spelled out once here: a
        # window is built on every read).
        total, start, limit, text = (
            self.field.size_chars,
            self.start_chars,
            self.limit_chars,
            self.text,
        )
        match_start, match_end = self.match_start_chars, self.match_end_chars
        cursors = (
            _NEXT_SLOT.__get__(self, FieldWindow),
            _PREVIOUS_SLOT.__get__(self, FieldWindow),
            _NEXT_MATCH_SLOT.__get__(self, FieldWindow),
        )
        for cursor in cursors:
            if cursor is not None and not isinstance(cursor, _CURSOR_TYPES):
                raise ValueError("a cursor is a string, or None")
        if not 0 <= start <= total:
            raise ValueError("start_chars must lie within the field")
        if not 1 <= limit <= MAX_LIMIT_CHARS:
            raise ValueError(f"limit_chars must be between 1 and {MAX_LIMIT_CHARS}")
        if len(text) != min(limit, total - start):
            raise ValueError("text must be the slice [start, start + limit) of the field")
        if (match_start is None) != (match_end is None):
            raise ValueError("match_start_chars and match_end_chars go together")
        if (
            match_start is not None
            and match_end is not None
            and not (0 <= match_start < match_end <= total)
        ):
            raise ValueError("the match must lie within the field")
        if (cursors[0] is None) != (start + len(text) >= total):  # next_offset_chars is None
            raise ValueError("next_cursor must be set exactly when next_offset_chars is")
        if (cursors[1] is None) != (start == 0):  # previous_offset_chars is None
            raise ValueError("previous_cursor must be set exactly when previous_offset_chars is")
        if cursors[2] is not None and match_start is None:
            raise ValueError("next_match_cursor belongs to match windows")

    @property
    def record(self) -> RecordRef:
        return RecordRef(self.connection_id, self.stream, self.record_id)

    @property
    def total_chars(self) -> int:
        return self.field.size_chars

    def _extent(self) -> _Extent:
        return _extent(self.field.size_chars, self.start_chars, self.limit_chars, len(self.text))

    @property
    def end_chars(self) -> int:
        return self._extent().end

    @property
    def complete(self) -> bool:
        return self._extent().complete

    @property
    def has_more(self) -> bool:
        return self._extent().has_more

    @property
    def next_offset_chars(self) -> int | None:
        return self._extent().next_offset

    @property
    def previous_offset_chars(self) -> int | None:
        return self._extent().previous_offset

    @property
    def next(self) -> Continuation | None:
        return self._by_cursor(self.next_cursor)

    @property
    def previous(self) -> Continuation | None:
        return self._by_cursor(self.previous_cursor)

    def _by_cursor(self, cursor: str | None) -> Continuation | None:
        if cursor is None:
            return None
        ref = FieldWindowRef(self.record, self.field.path, cursor=cursor)
        return Continuation.read_window(ref)

    def to_dict(self) -> dict[str, Any]:
        # The derived keys computed once (rule 2: a card is rendered on every read), each cursor
        # read (minted) once, and the continuations rendered from the names the record's field
        # shares (rule 3, `_continuation`).
        extent = self._extent()
        after, before = self.next_cursor, self.previous_cursor
        return {
            "object": "field_window",
            "stream": self.stream,
            "record_id": self.record_id,
            "connection_id": self.connection_id,
            "field": self.field.to_dict(),
            "window": {
                "text": self.text,
                "total_chars": self.field.size_chars,
                "start_chars": self.start_chars,
                "end_chars": extent.end,
                "limit_chars": self.limit_chars,
                "complete": extent.complete,
                "has_more": extent.has_more,
                "match_start_chars": self.match_start_chars,
                "match_end_chars": self.match_end_chars,
                "next_offset_chars": extent.next_offset,
                "previous_offset_chars": extent.previous_offset,
                "next_cursor": after,
                "previous_cursor": before,
                "next_match_cursor": self.next_match_cursor,
            },
            "next": self._continuation(after),
            "previous": self._continuation(before),
            "meta": {"warnings": [dict(warning) for warning in self.warnings]},
        }

    def _continuation(self, cursor: str | None) -> dict[str, Any] | None:
        """`self._by_cursor(cursor).to_dict()`, without building the `Continuation` and its
        references: the record argument and the handle's names are `cursor_window_names`'
        (checked as those references check them, once per record field), and the keys are in
        the order `Continuation` keeps them. A test holds the two to the same JSON."""
        if cursor is None:
            return None
        path = self.field.path
        record = (self.connection_id, self.stream, self.record_id, path)
        if type(cursor) is not str or not cursor or any(type(name) is not str for name in record):
            # refused (or not) as the references decide: only strings are kept by their names
            continuation = self._by_cursor(cursor)
            return None if continuation is None else continuation.to_dict()
        argument, names = cursor_window_names(self.connection_id, self.stream, self.record_id, path)
        return {
            "operation": "read_field_window",
            "arguments": {"cursor": cursor, "field": path, "record": argument},
            "resource_uri": cursor_window_uri(names, cursor),
        }


class _Deferred(partial[str]):
    """A cursor not minted yet: the call that mints it (see `deferred_cursor`)."""

    __slots__ = ()


def deferred_cursor(mint: Callable[..., str], *args: Any) -> str:
    """A cursor for a `FieldWindow` field that is minted (`mint(*args)`) when first read (rule
    4). Only the window's own fields hold it: read through them, it is always the token."""
    return _Deferred(mint, *args)  # type: ignore[return-value]  # a str once read (rule 4)


class _MintedOnRead:
    """A cursor field of `FieldWindow`: its slot, read through, minting a deferred cursor once
    and keeping the token in the slot (two threads may both mint it: the same token)."""

    __slots__ = ("_slot",)

    def __init__(self, slot: Any) -> None:
        self._slot = slot

    def __get__(self, window: FieldWindow | None, owner: type | None = None) -> Any:
        if window is None:
            return self
        value = self._slot.__get__(window, owner)
        if type(value) is _Deferred:
            value = value()
            self._slot.__set__(window, value)
        return value

    def __set__(self, window: FieldWindow, value: object) -> None:
        self._slot.__set__(window, value)  # only `__init__` sets: the window is frozen


_FIELD_NAMES = (
    "connection_id",
    "stream",
    "record_id",
    "field",
    "text",
    "start_chars",
    "limit_chars",
    "match_start_chars",
    "match_end_chars",
    "next_cursor",
    "previous_cursor",
    "warnings",
    "next_match_cursor",
)
(
    _SET_CONNECTION,
    _SET_STREAM,
    _SET_RECORD_ID,
    _SET_FIELD,
    _SET_TEXT,
    _SET_START,
    _SET_LIMIT,
    _SET_MATCH_START,
    _SET_MATCH_END,
    _SET_NEXT,
    _SET_PREVIOUS,
    _SET_WARNINGS,
    _SET_NEXT_MATCH,
) = slot_setters(FieldWindow, _FIELD_NAMES)
"""The slots' own setters (taken before the cursor fields become `_MintedOnRead`)."""
_NEW = object.__new__


def built_window(  # noqa: PLR0917 - the fields of `FieldWindow`, in its order
    connection_id: str,
    stream: str,
    record_id: str,
    field: FieldInfo,
    text: str,
    start_chars: int,
    limit_chars: int,
    match_start_chars: int | None,
    match_end_chars: int | None,
    next_cursor: str | None,
    previous_cursor: str | None,
    warnings: tuple[dict[str, str], ...],
    next_match_cursor: str | None,
) -> FieldWindow:
    """`FieldWindow(...)`, every field given in order, through its slots' own setters rather
    than a frozen `__init__`'s `object.__setattr__` (`_core.slots`); it checks itself as the
    constructor does (rule 1: the same `ValueError`s), and is then the same value (tested)."""
    window: FieldWindow = _NEW(FieldWindow)
    _SET_CONNECTION(window, connection_id)
    _SET_STREAM(window, stream)
    _SET_RECORD_ID(window, record_id)
    _SET_FIELD(window, field)
    _SET_TEXT(window, text)
    _SET_START(window, start_chars)
    _SET_LIMIT(window, limit_chars)
    _SET_MATCH_START(window, match_start_chars)
    _SET_MATCH_END(window, match_end_chars)
    _SET_NEXT(window, next_cursor)
    _SET_PREVIOUS(window, previous_cursor)
    _SET_WARNINGS(window, warnings)
    _SET_NEXT_MATCH(window, next_match_cursor)
    window.__post_init__()
    return window


_CURSOR_TYPES = (str, _Deferred)
_NEXT_SLOT, _PREVIOUS_SLOT, _NEXT_MATCH_SLOT = (
    FieldWindow.__dict__[name] for name in ("next_cursor", "previous_cursor", "next_match_cursor")
)
"""The slots themselves, which `__post_init__` reads without minting."""
for _slot in (_NEXT_SLOT, _PREVIOUS_SLOT, _NEXT_MATCH_SLOT):
    setattr(FieldWindow, _slot.__name__, _MintedOnRead(_slot))
