"""The tools' input schemas, derived from the operation catalogue (imports no SDK).

    TOOL_INPUTS["read_record_field"]   # {"type": "object", "properties": {...}, ...}
    TOOL_OPERATIONS["fetch"]           # ("read_record", "read_resource", "blob_info")

Each tool takes the arguments of one catalogued operation (`pdpp_store.CATALOGUE`), so a new
argument of that operation (a new selector argument in `SELECTOR_ARGS` included) appears in the
tool's schema without being spelled here. What is MCP's own is said here once: how an argument
type is written in JSON Schema, how a record is named (`id`, or `connection_id` + `stream` +
`record_id`), the descriptions and bounds an agent reads, and which arguments a tool leaves out
on purpose, with the reason.

Rules:
1. A property's JSON Schema is its type's (`_TYPES`), then the tool's details for it (`_DETAILS`:
   a description, bounds). A detail for an argument the operation does not have fails at import.
2. The grant is never an argument: it comes from the transport (a fixed grant over stdio, the
   bearer token's over HTTP).
3. A required argument is required in the schema, except the record of `read_record_field`,
   which may be named two ways (the server checks which, with typed errors: a root `oneOf`
   makes hosts drop the tool).
4. Properties follow the operation's argument order; among the selector arguments a
   continuation's `cursor` comes first, as the content-ladder design lists it
   (docs/contract.md §10).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pdpp_store import CATALOGUE, SELECTOR_ARGS

__all__ = ["ABSENT_OPERATIONS", "IDENTITY", "TOOL_INPUTS", "TOOL_OPERATIONS", "ToolInput"]

_STRING: dict[str, Any] = {"type": "string"}

_TYPES: dict[str, dict[str, Any]] = {
    "string": _STRING,
    "integer": {"type": "integer"},
    "strings": {"type": "array", "items": _STRING},
    "field": _STRING,
    "object": {"type": "object"},
}
"""The JSON Schema of each catalogue argument type a tool takes (rule 1); `record` and `grant`
are rendered by `_properties` (rules 2 and 3)."""

_RENAMED = {"field": "field_path"}
"""Catalogue argument names a tool spells otherwise (`as_tool_call` renames them back)."""

IDENTITY = ("connection_id", "stream", "record_id")
"""The parts that name a record beside its `id` (rule 3)."""


@dataclass(frozen=True, slots=True)
class ToolInput:
    """How one tool takes the arguments of the catalogued `operation`."""

    operation: str
    details: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per property: its description and bounds, as an agent reads them (rule 1)."""
    left_out: dict[str, str] = field(default_factory=dict)
    """Arguments of the operation the tool does not take, each with the reason."""
    record_by_parts: bool = False
    """The record may also be named by `connection_id` + `stream` + `record_id` (rule 3)."""


_TOOLS: dict[str, ToolInput] = {
    "search": ToolInput(
        "search",
        details={
            "q": {
                "description": 'Terms, all required, case-insensitive; "a quoted phrase" is one '
                "term."
            },
            "streams": {"description": "Only these streams."},
            "connection_id": {"description": "Only this connection."},
            "order": {
                "enum": ["relevance", "desc", "asc"],
                "description": "relevance (default: best score first, ties newest first), "
                "desc (newest first) or asc (oldest first).",
            },
            "filter": {
                "description": 'One clause per granted field, all ANDed: {"f": value}, '
                '{"f": {"in": [...]}}, {"f": {"has": value}}, {"f": {"gte": ..., "lt": ...}} '
                "(ranges where the schema tool lists them)."
            },
            "limit": {"minimum": 1, "maximum": 50},
            "cursor": {"description": "next_cursor of the previous page."},
            "count": {"enum": ["none", "exact"], "description": "exact: also count every hit."},
        },
    ),
    "fetch": ToolInput(
        "read_record",
        details={
            "id": {
                "description": "Record id 'connection/stream:record_id', or a pdpp://record/, "
                "pdpp://field-window/ or pdpp://blob/ URI."
            },
            "after_field": {
                "description": "For a wide or long record: show the fields after this one "
                "(see 'next')."
            },
        },
        left_out={
            "fields": "fetch shows every granted field, a wide record paged with after_field; "
            "a narrower view is a narrower grant",
        },
    ),
    "read_record_field": ToolInput(
        "read_field_window",
        details={
            "id": {
                "description": "Record id 'connection/stream:record_id' (as search and fetch "
                "show it), or a pdpp://record/ or pdpp://field-window/ URI. Or give "
                "connection_id, stream and record_id instead."
            },
            "field_path": {"description": "Top-level field name, literally."},
            "cursor": {
                "description": "next_cursor or previous_cursor of an earlier window. Alone, or "
                "with limit_chars."
            },
            "offset_chars": {"minimum": 0},
            "limit_chars": {"minimum": 1, "maximum": 16384},
            "q": {
                "description": "Window around the first case-insensitive match of q. Not with "
                "offset_chars or cursor."
            },
            "before_chars": {"minimum": 0, "maximum": 8192},
            "after_chars": {"minimum": 0, "maximum": 8192},
        },
        left_out={
            "occurrence": "the content-ladder design (docs/contract.md §10) fixes the tool's "
            "properties; a later match is reached through the window's next-match cursor",
        },
        record_by_parts=True,
    ),
    "schema": ToolInput(
        "describe_grant",
        details={
            "stream": {"description": "Only this stream."},
            "limit": {"minimum": 1, "maximum": 100, "description": "Streams a page (25)."},
            "after": {"description": "The streams after this one (a page's next)."},
        },
    ),
    "query_records": ToolInput(
        "query_records",
        details={
            "stream": {"description": "The stream (see schema)."},
            "connection_id": {"description": "Only this connection."},
            "filter": {
                "description": 'Clauses ANDed: {"f": v}, {"f": {"in": [..]}}, {"f": {"has": v}}, '
                '{"f": {"gte": v, "lt": v}}; the fields and operators schema lists.'
            },
            "order": {"enum": ["desc", "asc"], "description": "By the order field; desc first."},
            "fields": {"description": "Only these granted fields."},
            "limit": {"minimum": 1, "maximum": 100},
            "cursor": {"description": "next_cursor of the previous page."},
            "count": {"enum": ["none", "exact"]},
            "changes_since": {
                "description": "'beginning' or a next_changes_since: what changed since."
            },
        },
    ),
    "aggregate": ToolInput(
        "aggregate",
        details={
            "metric": {"enum": ["count", "sum", "min", "max", "count_distinct"]},
            "field": {"description": "The field sum/min/max/count_distinct read."},
            "group_by": {"description": "Largest groups first."},
            "group_by_time": {"description": "Time buckets of this field, oldest first."},
            "granularity": {"enum": ["hour", "day", "week", "month", "year"]},
            "time_zone": {"description": "IANA zone of the buckets (default UTC)."},
            "filter": {
                "description": 'One clause per field: {"f": v}, {"f": {"in": [..]}}, '
                '{"f": {"gte": v}}.'
            },
            "limit": {"minimum": 1, "maximum": 100},
        },
    ),
}


def _properties(tool: ToolInput) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The tool's properties in the operation's argument order (rule 4), and the required."""
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    selector: dict[str, dict[str, Any]] = {}
    arguments = CATALOGUE[tool.operation].arguments
    takes_selector = set(SELECTOR_ARGS) <= {argument.name for argument in arguments}
    for argument in arguments:
        if argument.type == "grant" or argument.name in tool.left_out:  # rule 2
            continue
        if argument.type == "record":
            names = ("id", *IDENTITY) if tool.record_by_parts else ("id",)
            properties.update((name, dict(_STRING)) for name in names)
            if not tool.record_by_parts:
                required.append("id")
            continue
        name = _RENAMED.get(argument.type, argument.name)
        if name in properties:  # `connection_id`, already one of the record's parts
            continue
        if argument.type not in _TYPES:
            raise TypeError(f"{tool.operation}: no JSON Schema for {argument.type!r} arguments")
        target = selector if takes_selector and argument.name in SELECTOR_ARGS else properties
        target[name] = dict(_TYPES[argument.type])
        if argument.required:
            required.append(name)
    if "cursor" in selector:
        selector = {"cursor": selector.pop("cursor"), **selector}
    properties.update(selector)
    for name, details in tool.details.items():
        if name not in properties:
            raise KeyError(f"{tool.operation} has no argument {name!r} for the tool to describe")
        properties[name].update(details)
    return properties, required


def _schema(tool: ToolInput) -> dict[str, Any]:
    properties, required = _properties(tool)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    return schema


TOOL_INPUTS: dict[str, dict[str, Any]] = {name: _schema(tool) for name, tool in _TOOLS.items()}
"""Each tool's input schema, by tool name."""

TOOL_OPERATIONS: dict[str, tuple[str, ...]] = {
    "search": ("search",),
    "fetch": ("read_record", "read_resource", "blob_info"),
    "read_record_field": ("read_field_window",),
    "schema": ("describe_grant",),
    "query_records": ("query_records",),
    "aggregate": ("aggregate",),
}
"""The catalogued operations each tool performs (fetch reads a record, a field-window URI or a
blob's metadata); tests hold the published tools to the catalogue with it."""

ABSENT_OPERATIONS: dict[str, str] = {
    "describe_field": "read_record_field refuses a field that is not text with its metadata, "
    "and fetch shows binary fields as metadata only",
    "read_blob_range": "the MCP server shows a blob's metadata, never its bytes",
}
"""Read operations no tool performs, each with the reason."""
