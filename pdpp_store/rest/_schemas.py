"""What the OpenAPI document says each response holds, as named components.

Rules:
1. Success bodies are described by the evidence cards' own JSON Schemas
   (`pdpp_store.evidence`), never by a second copy written here; the REST layer adds only what it
   adds to the wire (`url`, `links` of a field window: `FieldWindowResponse`).
2. The error envelope is the evidence's `Error` schema plus `request_id` (what `_errors` adds).
   Every route lists every status it can answer with, each with that envelope.
3. Every schema is named once under `components.schemas` (`COMPONENTS`) and referenced by
   `$ref` wherever it is used, inside other schemas too: a card's schema that holds another card
   inline holds a `$ref` to it instead, so generated clients get one class per card.
4. A continuation's `arguments` are typed (`ContinuationArguments`): every argument a
   continuation of `read_field_window`, `read_record`, `search` or `query_records` (also an
   aggregate group's records) can carry, by name and type.
5. Response headers are documented where they are sent: `ETag` on what has one, `Content-Range`
   on a byte range and on 416, `X-Request-Id` on every answer (added by `create_app`).
6. The finished document (`finish_document`, run on every route, new ones too) passes a standard
   OpenAPI linter (Redocly's `recommended` rules; tests/surfaces/test_openapi_lint.py): an
   operation that declares no security (the discovery routes a client reads before it holds a
   token) says so with `security: []`; only components some path reaches are kept; and a
   conditional subschema (`if`/`then`/`else`, `not`, `anyOf`...) that requires a property of its
   card names that property too (as `{}`, which changes nothing a validator accepts), so a
   linter can see that each required name is defined.
"""

from __future__ import annotations

import copy
from typing import Any

from pdpp_store import SELECTOR_ARGS, evidence

__all__ = [
    "COMPONENTS",
    "ERROR_SCHEMA",
    "HEADERS",
    "card_schema",
    "error_responses",
    "field_window_schema",
    "finish_document",
    "json_response",
    "ref",
]

_PREFIX = "#/components/schemas/"


def ref(name: str) -> dict[str, Any]:
    """A reference to the component schema `name`."""
    return {"$ref": _PREFIX + name}


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
    410: "The cursor or changes bookmark is older than the store keeps (cursor_expired).",
    412: "If-Match named another digest: the field's text has changed.",
    416: "The Range starts at or past the end of the blob (Content-Range: bytes */size).",
    422: "The field is not text (binary-only, a blob reference): its metadata is in the error.",
    503: "The database is unavailable or busy; retry.",
}


def _card(name: str) -> dict[str, Any]:
    """The published JSON Schema of the evidence card `name` (`pdpp_store.evidence`)."""
    return _without_dialect(evidence.json_schemas()[name])


def card_schema(name: str) -> dict[str, Any]:
    """The reference to the evidence card `name`'s component schema (rule 3)."""
    assert name in COMPONENTS, name
    return ref(name)


def _field_window_response() -> dict[str, Any]:
    """The field-window envelope's schema (docs/contract.md §3) plus what REST adds: `url` and
    `links`."""
    card = _card("FieldWindow")
    link = {"type": ["string", "null"]}
    return {
        **card,
        "title": "FieldWindowResponse",
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


def field_window_schema() -> dict[str, Any]:
    """The reference to the field-window answer's component schema."""
    return ref("FieldWindowResponse")


_JSON_TYPES = {int: "integer", str: "string", bool: "boolean"}


def _continuation_arguments() -> dict[str, Any]:
    """Rule 4: the arguments of the operations a continuation names, typed; the selector's from
    `SELECTOR_ARGS`, so a new selector argument is documented here by itself."""
    text = {"type": "string"}
    names = {"type": "array", "items": text}
    properties: dict[str, Any] = {
        "record": {**text, "description": "The record as a self-contained id."},
        "field": {**text, "description": "read_field_window: the field's path."},
        **{
            arg.name: {"type": _JSON_TYPES.get(arg.type, "string"), "description": arg.help}
            for arg in SELECTOR_ARGS.values()
        },
        "after_field": {**text, "description": "read_record: the fields after this path."},
        "fields": {**names, "description": "read_record: only these fields."},
        "limit": {"type": "integer", "description": "search, describe_grant: a page's size."},
        "streams": {**names, "description": "search: only these streams."},
        "connection_id": {**text, "description": "search, query_records: only this connection."},
        "stream": {**text, "description": "query_records: the stream."},
        "after": {**text, "description": "describe_grant: the streams after this one."},
        "filter": {"type": "object", "description": "query_records: the filter (§11.1)."},
        "order": {**text, "description": "query_records: desc or asc."},
        "count": {**text, "description": "query_records: none or exact."},
        "changes_since": {**text, "description": "query_records: the changes bookmark."},
    }
    return {
        "title": "ContinuationArguments",
        "description": "The keyword arguments of the library operation a continuation names.",
        "type": "object",
        "properties": properties,
    }


def _hoisted(schema: dict[str, Any], cards: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`schema` with every nested schema equal to a card's replaced by its `$ref` (rule 3)."""

    def walk(node: Any, top: bool) -> Any:
        if isinstance(node, dict):
            if not top:
                for name, card in cards.items():
                    if node == card:
                        return ref(name)
            return {key: walk(value, False) for key, value in node.items()}
        if isinstance(node, list):
            return [walk(value, False) for value in node]
        return node

    hoisted: dict[str, Any] = walk(schema, True)
    return hoisted


def _components() -> dict[str, dict[str, Any]]:
    cards = {
        name: _without_dialect(schema)
        for name, schema in evidence.json_schemas().items()
        if name != "Error"  # REST's own (with request_id) below
    }
    components = {name: _hoisted(schema, cards) for name, schema in cards.items()}
    components["Continuation"]["properties"]["arguments"] = ref("ContinuationArguments")
    components["ContinuationArguments"] = _continuation_arguments()
    components["FieldWindowResponse"] = _hoisted(_field_window_response(), cards)
    components["StreamList"] = {
        "title": "StreamList",
        "description": "A page of the granted streams (GET /v1/streams).",
        "type": "object",
        "required": ["object", "data", "has_more", "next"],
        "properties": {
            "object": {"const": "list"},
            "data": {"type": "array", "items": ref("StreamSchema")},
            "has_more": {"type": "boolean"},
            "next": {"anyOf": [ref("Continuation"), {"type": "null"}]},
        },
        "additionalProperties": False,
    }
    components["Error"] = _hoisted(ERROR_SCHEMA, cards)
    return components


COMPONENTS: dict[str, dict[str, Any]] = _components()
"""The document's `components.schemas` (rule 3)."""

HEADERS: dict[str, dict[str, Any]] = {
    "ETag": {
        "description": "The entity tag: a field window's field digest, a record's revision, "
        "a blob's sha256.",
        "schema": {"type": "string"},
    },
    "Content-Range": {
        "description": "The range sent (206), or `bytes */size` (416).",
        "schema": {"type": "string"},
    },
    "X-Request-Id": {
        "description": "This request's id (also `request_id` in an error).",
        "schema": {"type": "string"},
    },
}
"""Response headers (rule 5), each documented where the response sends it."""


def headers(*names: str) -> dict[str, Any]:
    return {name: HEADERS[name] for name in names}


def json_response(
    schema: dict[str, Any], description: str, *, sent: tuple[str, ...] = ()
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": schema}},
    }
    if sent:
        response["headers"] = headers(*sent)
    return response


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error statuses of a route, each with the envelope."""
    return {
        status: json_response(
            ref("Error"), _DESCRIPTIONS[status], sent=("Content-Range",) if status == 416 else ()
        )
        for status in statuses
    }


# ---------------------------------------------------------------- the finished document (rule 6)


def _reached(document: dict[str, Any]) -> set[str]:
    """The component schemas some path reaches, through any chain of `$ref`s."""
    schemas = document.get("components", {}).get("schemas", {})
    reached: set[str] = set()
    pending: list[Any] = [document.get("paths", {})]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str) and target.startswith(_PREFIX):
                name = target.removeprefix(_PREFIX)
                if name not in reached and name in schemas:
                    reached.add(name)
                    pending.append(schemas[name])
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)
    return reached


_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf")
_SUBSCHEMAS = ("if", "then", "else", "not")


def _name_required(schema: dict[str, Any]) -> None:
    """Each conditional subschema of the object schema `schema` (and of every schema inside it)
    that requires one of `schema`'s properties also names it, as `{}` (rule 6)."""
    known = schema.get("properties")

    def mark(node: Any) -> None:
        if not isinstance(node, dict):
            return
        if isinstance(known, dict):
            for name in node.get("required", ()):
                if name in known and name not in node.get("properties", {}):
                    node.setdefault("properties", {})[name] = {}
        for key in _SUBSCHEMAS:
            mark(node.get(key))
        for key in _SUBSCHEMA_LISTS:
            for item in node.get(key, ()):
                mark(item)

    for key in _SUBSCHEMAS:
        mark(schema.get(key))
    for key in _SUBSCHEMA_LISTS:
        for item in schema.get(key, ()):
            mark(item)
    for child in (known or {}).values():
        if isinstance(child, dict):
            _name_required(child)
    items = schema.get("items")
    if isinstance(items, dict):
        _name_required(items)


def finish_document(document: dict[str, Any]) -> dict[str, Any]:
    """The OpenAPI document made lint-clean by rule 6, in place; returned for convenience."""
    for path in document.get("paths", {}).values():
        for operation in path.values():
            if isinstance(operation, dict) and "responses" in operation:
                operation.setdefault("security", [])
    schemas = document.get("components", {}).get("schemas", {})
    kept = _reached(document)
    for name in [name for name in schemas if name not in kept]:
        del schemas[name]
    for schema in schemas.values():
        _name_required(schema)
    return document
