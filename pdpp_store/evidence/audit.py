"""`AuditEntry`: one answered read as the store recorded it (docs/contract.md §14, "Read audit").

Rules:
1. An entry says who asked (grant, client, surface, request id), what was asked (operation,
   stream, connection, the query terms and filters as the caller gave them) and what was served
   (the ids of the records, the first 100 of them and how many, the field paths, the outcome
   code): never a field value. A cursor or a changes bookmark is opaque and may carry a value of
   the order field, so `terms` says only that one was given (`"<given>"`).
2. `record_ids` are self-contained record ids (`connection/stream:record_id`), at most 100;
   `record_count` is how many the answer served (a search page's hits, a list page's rows,
   one for a record or a window, none for an aggregate or a discovery).
3. `at` is a fixed-width UTC ISO-8601 instant; `audit_id` orders entries as they were written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ._schema import card, nullable

__all__ = ["AuditEntry"]

_STRING = {"type": "string"}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    audit_id: int
    at: str
    surface: str
    operation: str
    outcome: str
    request_id: str | None = None
    grant_id: str | None = None
    client: str | None = None
    stream: str | None = None
    connection_id: str | None = None
    record_ids: tuple[str, ...] = ()
    record_count: int = 0
    fields: tuple[str, ...] = ()
    terms: Mapping[str, Any] = field(default_factory=dict)

    JSON_SCHEMA: ClassVar[dict[str, Any]] = card(
        "AuditEntry",
        {
            "object": {"const": "audit_entry"},
            "audit_id": {"type": "integer", "minimum": 1},
            "at": {"type": "string", "format": "date-time"},
            "request_id": nullable(_STRING),
            "grant_id": nullable(_STRING),
            "client": nullable(_STRING),
            "surface": {"enum": ["library", "cli", "rest", "mcp"]},
            "operation": _STRING,
            "stream": nullable(_STRING),
            "connection_id": nullable(_STRING),
            "record_ids": {"type": "array", "items": _STRING, "maxItems": 100},
            "record_count": {"type": "integer", "minimum": 0},
            "fields": {"type": "array", "items": _STRING},
            "outcome": _STRING,
            "terms": {"type": "object"},
        },
        [
            "object",
            "audit_id",
            "at",
            "request_id",
            "grant_id",
            "client",
            "surface",
            "operation",
            "stream",
            "connection_id",
            "record_ids",
            "record_count",
            "fields",
            "outcome",
            "terms",
        ],
    )

    def to_dict(self) -> dict[str, Any]:
        return {
            "object": "audit_entry",
            "audit_id": self.audit_id,
            "at": self.at,
            "request_id": self.request_id,
            "grant_id": self.grant_id,
            "client": self.client,
            "surface": self.surface,
            "operation": self.operation,
            "stream": self.stream,
            "connection_id": self.connection_id,
            "record_ids": list(self.record_ids),
            "record_count": self.record_count,
            "fields": list(self.fields),
            "outcome": self.outcome,
            "terms": dict(self.terms),
        }
