"""What the OpenAPI document says each response holds.

Rules:
1. Success bodies are described by the evidence cards' own JSON Schemas
   (`pdpp_store.evidence`), never by a second copy written here; the REST layer adds only what it
   adds to the wire (`url`, `links` of a field window).
2. The error envelope is the evidence's `Error` schema plus `request_id` (what `_errors` adds).
   Every route lists every status it can answer with, each with that envelope.
"""

from __future__ import annotations

import copy
from typing import Any

from pdpp_store import evidence

__all__ = [
    "ERROR_SCHEMA",
    "card_schema",
    "error_responses",
    "field_window_schema",
    "json_response",
]


def _without_dialect(schema: dict[str, Any]) -> dict[str, Any]:
    """A card's schema as part of the OpenAPI document (which names its own dialect)."""
    return {key: value for key, value in schema.items() if key != "$schema"}


def _error_schema() -> dict[str, Any]:
    """The library's error envelope, plus what REST adds to it: `request_id`, always."""
    schema = copy.deepcopy(_without_dialect(evidence.json_schemas()["Error"]))
    body = schema["properties"]["error"]
    body["properties"]["request_id"] = {"type": "string"}
    body["required"] = [*body["required"], "request_id"]
    return schema


ERROR_SCHEMA: dict[str, Any] = _error_schema()

_DESCRIPTIONS = {
    304: "Not modified: the client's copy (If-None-Match) is current.",
    400: "Invalid request: a parameter, a cursor or the field path (invalid_request_error).",
    401: "Missing or unknown bearer token (authentication_error, with WWW-Authenticate).",
    403: "The grant does not allow this read, or is expired or revoked (permission_error).",
    404: "Not found, or not visible under the grant: the two answer alike (not_found_error).",
    405: "Method not allowed.",
    409: "Stale cursor, or an ambiguous or conflicting connection.",
    412: "If-Match named another digest: the field's text has changed.",
    416: "The Range starts at or past the end of the blob (Content-Range: bytes */size).",
    422: "The field is not text (binary-only, a blob reference): its metadata is in the error.",
    503: "The database is unavailable or busy; retry.",
}


def card_schema(name: str) -> dict[str, Any]:
    """The published JSON Schema of the evidence card `name` (`pdpp_store.evidence`)."""
    return _without_dialect(evidence.json_schemas()[name])


def field_window_schema() -> dict[str, Any]:
    """The field-window envelope's schema (docs/contract.md §3) plus what REST adds: `url` and
    `links`."""
    card = card_schema("FieldWindow")
    link = {"type": ["string", "null"]}
    return {
        **card,
        "required": [*card.get("required", ()), "url", "links"],
        "properties": {
            **card.get("properties", {}),
            "url": {"type": "string"},
            "links": {
                "type": "object",
                "required": ["self", "next", "previous"],
                "properties": {"self": {"type": "string"}, "next": link, "previous": link},
                "additionalProperties": False,
            },
        },
    }


def json_response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error statuses of a route, each with the envelope."""
    return {status: json_response(ERROR_SCHEMA, _DESCRIPTIONS[status]) for status in statuses}
