"""`GrantSchema`: what a grant lets an agent see, from the manifests alone (never a record).

Rules:
1. Per granted stream: the connections the grant covers that declare it, and the declared
   fields the grant covers (all declared fields under an owner grant), each with its declared
   JSON type, whether it is text-like (binary-only per the manifest: blob references, base64)
   and whether search looks at it (`query.search.lexical_fields` minus ungranted fields).
2. A stream the grant names but no covered connection declares is listed with no connections
   and no fields: the grant names it, the data does not exist.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ._schema import card, embedded

__all__ = ["FieldSchema", "GrantSchema", "StreamSchema"]


@dataclass(frozen=True, slots=True)
class FieldSchema:
    path: str
    json_type: str
    text_like: bool
    searchable: bool

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "FieldSchema",
        {
            "path": {"type": "string"},
            "type": {"type": "string"},
            "text_like": {"type": "boolean"},
            "searchable": {"type": "boolean"},
        },
        ["path", "type", "text_like", "searchable"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "type": self.json_type,
            "text_like": self.text_like,
            "searchable": self.searchable,
        }


@dataclass(frozen=True, slots=True)
class StreamSchema:
    name: str
    connection_ids: tuple[str, ...]
    fields: tuple[FieldSchema, ...]

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "StreamSchema",
        {
            "name": {"type": "string"},
            "connection_ids": {"type": "array", "items": {"type": "string"}},
            "searchable_fields": {"type": "array", "items": {"type": "string"}},
            "fields": {"type": "array", "items": embedded(FieldSchema.JSON_SCHEMA)},
        },
        ["name", "connection_ids", "searchable_fields", "fields"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "connection_ids": list(self.connection_ids),
            "searchable_fields": [f.path for f in self.fields if f.searchable],
            "fields": [f.to_dict() for f in self.fields],
        }


@dataclass(frozen=True, slots=True)
class GrantSchema:
    grant_id: str
    streams: tuple[StreamSchema, ...]

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "GrantSchema",
        {
            "object": {"const": "grant_schema"},
            "grant_id": {"type": "string"},
            "streams": {"type": "array", "items": embedded(StreamSchema.JSON_SCHEMA)},
        },
        ["object", "grant_id", "streams"],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": "grant_schema",
            "grant_id": self.grant_id,
            "streams": [s.to_dict() for s in self.streams],
        }
