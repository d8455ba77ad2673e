"""Search cards (docs/contract.md §9): a page of hits, each hit with proven evidence per matched
field.

Rules:
1. Evidence is proven: `match_start_chars`/`match_end_chars` are the code-point offsets of the
   first occurrence of the term in the field whose digest is `digest`; `preview_text` is the
   field's own text `[start_chars, end_chars)`, unmarked (highlights are offsets, never markup
   inside private text), and holds the match.
2. `read` is the `read_field_window` call (with `q`) that returns a window holding the same
   match, and `resource_uri` the offset window of the same text.
3. Every card is bounded: at most `MAX_PAGE_SIZE` hits, one excerpt per searchable field, and
   previews of at most `PREVIEW_BEFORE + MAX_TERM_CHARS + PREVIEW_AFTER` code points.
4. A hit carries its record card (`RecordCard`, docs/contract.md §13): the slots of its
   declared-role fields the grant covers, each bounded; the same card a `query_records` row and
   the head of `read_record` carry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ._schema import card as card_schema
from ._schema import embedded, nullable
from .card import RecordCard
from .continuation import Continuation

__all__ = ["MatchExcerpt", "SearchHit", "SearchPage"]

_INT = {"type": "integer", "minimum": 0}


@dataclass(frozen=True, slots=True)
class MatchExcerpt:
    field_path: str
    term: str
    """The term matched (as written); `read.arguments["q"]`."""
    match_start_chars: int
    match_end_chars: int
    preview_text: str
    start_chars: int
    total_chars: int
    digest: str
    read: Continuation

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card_schema(
        "MatchExcerpt",
        {
            "field_path": {"type": "string"},
            "match_start_chars": _INT,
            "match_end_chars": _INT,
            "preview_text": {"type": "string"},
            "start_chars": _INT,
            "end_chars": _INT,
            "total_chars": _INT,
            "digest": {"type": "string", "pattern": "^sha256:[0-9a-f]{64}$"},
            "read": embedded(Continuation.JSON_SCHEMA),
        },
        [
            "field_path",
            "match_start_chars",
            "match_end_chars",
            "preview_text",
            "start_chars",
            "end_chars",
            "total_chars",
            "digest",
            "read",
        ],
    )

    def __post_init__(self) -> None:
        end = self.start_chars + len(self.preview_text)
        if not (
            0
            <= self.start_chars
            <= self.match_start_chars
            < self.match_end_chars
            <= end
            <= self.total_chars
        ):
            raise ValueError("an excerpt's preview must hold its match, within the field")

    @property
    def end_chars(self) -> int:
        return self.start_chars + len(self.preview_text)

    def to_dict(self) -> dict[str, Any]:
        return {
            "field_path": self.field_path,
            "match_start_chars": self.match_start_chars,
            "match_end_chars": self.match_end_chars,
            "preview_text": self.preview_text,
            "start_chars": self.start_chars,
            "end_chars": self.end_chars,
            "total_chars": self.total_chars,
            "digest": self.digest,
            "read": self.read.to_dict(),
        }


@dataclass(frozen=True, slots=True)
class SearchHit:
    connection_id: str
    stream: str
    record_id: str
    excerpts: tuple[MatchExcerpt, ...]
    score: float | None = None
    """The relevance score (docs/contract.md §9, "Order"; `_core.relevance`)."""
    card: RecordCard | None = None
    """The record's card (docs/contract.md §13): its declared-role slots under the grant."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card_schema(
        "SearchHit",
        {
            "object": {"const": "search_result"},
            "id": {"type": "string"},
            "stream": {"type": "string"},
            "record_key": {"type": "string"},
            "connection_id": {"type": "string"},
            "matched_fields": {"type": "array", "items": {"type": "string"}},
            "snippet": {"type": "string"},
            "evidence_excerpts": {"type": "array", "items": embedded(MatchExcerpt.JSON_SCHEMA)},
            "score": {"type": "number"},
            "card": embedded(RecordCard.JSON_SCHEMA),
        },
        [
            "object",
            "id",
            "stream",
            "record_key",
            "connection_id",
            "matched_fields",
            "snippet",
            "evidence_excerpts",
        ],
    )

    @property
    def id(self) -> str:
        return f"{self.connection_id}/{self.stream}:{self.record_id}"

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.connection_id, self.stream, self.record_id)

    def to_dict(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "object": "search_result",
            "id": self.id,
            "stream": self.stream,
            "record_key": self.record_id,
            "connection_id": self.connection_id,
            "matched_fields": [excerpt.field_path for excerpt in self.excerpts],
            "snippet": self.excerpts[0].preview_text if self.excerpts else "",
            "evidence_excerpts": [excerpt.to_dict() for excerpt in self.excerpts],
        }
        if self.score is not None:
            answer["score"] = self.score
        if self.card is not None:
            answer["card"] = self.card.to_dict()
        return answer


@dataclass(frozen=True, slots=True)
class SearchPage:
    hits: tuple[SearchHit, ...]
    next_cursor: str | None = None
    next: Continuation | None = None
    """The `search` call that reads the next page (the same arguments, `cursor` set to
    `next_cursor`); None on the last page."""
    count: int | None = None
    """With `count="exact"`: the number of visible hits (every page of the search)."""

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card_schema(
        "SearchPage",
        {
            "object": {"const": "list"},
            "data": {"type": "array", "items": embedded(SearchHit.JSON_SCHEMA)},
            "has_more": {"type": "boolean"},
            "next_cursor": nullable({"type": "string"}),
            "next": nullable(embedded(Continuation.JSON_SCHEMA)),
            "complete": {"type": "boolean"},
            "count": {
                "type": "object",
                "properties": {"kind": {"const": "exact"}, "value": {"type": "integer"}},
                "required": ["kind", "value"],
            },
        },
        ["object", "data", "has_more", "next_cursor", "next", "complete"],
    )

    @property
    def has_more(self) -> bool:
        return self.next_cursor is not None

    def to_dict(self) -> dict[str, Any]:
        answer: dict[str, Any] = {
            "object": "list",
            "data": [hit.to_dict() for hit in self.hits],
            "has_more": self.has_more,
            "next_cursor": self.next_cursor,
            "next": None if self.next is None else self.next.to_dict(),
            "complete": not self.has_more,
        }
        if self.count is not None:
            answer["count"] = {"kind": "exact", "value": self.count}
        return answer
