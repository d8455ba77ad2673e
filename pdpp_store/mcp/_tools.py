"""The tools and resource templates the server publishes: names, descriptions, JSON Schemas.

Rules:
1. `read_record_field` has exactly the input properties, bounds and structured output of the
   content-ladder design (docs/contract.md §10). Its input schema's root is a plain object: the
   identity rule (`id`, or `connection_id` + `stream` + `record_id`) and the selector rules are
   enforced by the server with typed errors, because hosts drop a tool whose root schema is a
   `oneOf`. Every input schema is derived from the operation catalogue (`_inputs`).
2. Every tool is read-only and idempotent (annotations), and no tool has an open world.
3. Descriptions tell an agent the ladder (search, evidence, window, continuation) in a few lines;
   the whole `tools/list` answer stays under `TOOLS_LIST_BUDGET_BYTES`.
4. `search` and `fetch` publish output schemas for what ChatGPT-style hosts read (docs/contract.md
   §14): `search`'s `results: [{id, title, url}]`, `fetch`'s `{id, title, text, url, metadata}`.
   Each names only those keys and leaves the rest of the object open: the ladder's own keys
   (the search page, the record page or window) ride beside them.
"""

from __future__ import annotations

from typing import Any

import mcp_types as types

from ._inputs import TOOL_INPUTS

__all__ = [
    "FETCH_OUTPUT",
    "READ_RECORD_FIELD_INPUT",
    "READ_RECORD_FIELD_OUTPUT",
    "RESOURCE_TEMPLATES",
    "SEARCH_OUTPUT",
    "TOOLS",
    "TOOLS_LIST_BUDGET_BYTES",
]

TOOLS_LIST_BUDGET_BYTES = 12_288
"""docs/contract.md §10: all tools together, as `tools/list` answers."""

_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}

READ_RECORD_FIELD_INPUT = TOOL_INPUTS["read_record_field"]

READ_RECORD_FIELD_OUTPUT: dict[str, Any] = {
    "type": "object",
    "required": ["record", "field", "window"],
    "properties": {
        "record": {
            "type": "object",
            "required": ["id", "connection_id", "stream", "record_id"],
            "properties": {
                "id": _STRING,
                "connection_id": _STRING,
                "stream": _STRING,
                "record_id": _STRING,
            },
            "additionalProperties": False,
        },
        "field": {
            "type": "object",
            "required": ["path", "text_like"],
            "properties": {
                "path": _STRING,
                "mime_type": _STRING,
                "text_like": {"type": "boolean"},
                "size_chars": {"type": "integer"},
                "digest": _STRING,
            },
            "additionalProperties": False,
        },
        "window": {
            "type": "object",
            "required": ["text", "start_chars", "end_chars", "limit_chars", "complete"],
            "properties": {
                "text": _STRING,
                "start_chars": {"type": "integer"},
                "end_chars": {"type": "integer"},
                "limit_chars": {"type": "integer"},
                "complete": {"type": "boolean"},
                "next_cursor": _NULLABLE_STRING,
                "previous_cursor": _NULLABLE_STRING,
                "match": {
                    "type": ["object", "null"],
                    "properties": {
                        "q": _STRING,
                        "start_chars": {"type": "integer"},
                        "end_chars": {"type": "integer"},
                    },
                    "additionalProperties": False,
                },
            },
            "additionalProperties": False,
        },
        "resource": {
            "type": "object",
            "properties": {
                "uri": _STRING,
                "next_uri": _NULLABLE_STRING,
                "previous_uri": _NULLABLE_STRING,
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
}

SEARCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "required": ["results"],
    "properties": {
        "results": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "title", "url"],
                "properties": {"id": _STRING, "title": _STRING, "url": _STRING},
            },
        },
    },
}

FETCH_OUTPUT: dict[str, Any] = {
    "type": "object",
    "required": ["id", "title", "text", "url", "metadata"],
    "properties": {
        "id": _STRING,
        "title": _STRING,
        "text": _STRING,
        "url": _STRING,
        "metadata": {"type": "object"},
    },
}

_LADDER = (
    "Every answer starts with a one-line JSON header; 'next'/'read' give the exact tool call "
    "that continues (tool and arguments): make it to read more."
)

_ANNOTATIONS = types.ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)

TOOLS: list[types.Tool] = [
    types.Tool(
        name="search",
        title="Search the granted data",
        description="Find records whose searchable granted fields contain every term. Each hit "
        "shows proven evidence: the matched field, the match's offsets, a short preview, and the "
        "read_record_field call that reads around it. A hit marked metadata_only has no proven "
        "text match. Structured results also list {id, title, url} per hit. " + _LADDER,
        input_schema=TOOL_INPUTS["search"],
        output_schema=SEARCH_OUTPUT,
        annotations=_ANNOTATIONS,
    ),
    types.Tool(
        name="fetch",
        title="Fetch one record",
        description="One record by id: its granted fields, short ones whole, long text as a "
        "preview with the read_record_field call that continues it, binary fields as metadata "
        "only. Also accepts pdpp://record/, pdpp://field-window/ and pdpp://blob/ URIs. "
        "Structured: {id, title, text, url, metadata}, text bounded. " + _LADDER,
        input_schema=TOOL_INPUTS["fetch"],
        output_schema=FETCH_OUTPUT,
        annotations=_ANNOTATIONS,
    ),
    types.Tool(
        name="read_record_field",
        title="Read a bounded window of one field",
        description="Read up to limit_chars (default 4096, max 16384) characters of one text "
        "field of a record: from offset_chars, around the first match of q, or from a cursor. "
        "The text follows the header line verbatim; header.next and header.previous are the "
        "calls for the adjacent windows (null at the ends). Offsets count Unicode code points. "
        "Binary fields are refused with their metadata.",
        input_schema=TOOL_INPUTS["read_record_field"],
        output_schema=READ_RECORD_FIELD_OUTPUT,
        annotations=_ANNOTATIONS,
    ),
    types.Tool(
        name="aggregate",
        title="Count, sum and bucket a stream",
        description="Answer how many / how much / when in one call: count, or sum, min, max, "
        "count_distinct of a field, optionally per value of a field (group_by) or per time "
        "bucket (group_by_time, granularity, time_zone), as the stream declares (see schema). "
        "Each group carries the call that lists its records; other_count counts the records "
        "of the groups left out.",
        input_schema=TOOL_INPUTS["aggregate"],
        annotations=_ANNOTATIONS,
    ),
    types.Tool(
        name="schema",
        title="What the grant covers",
        description="Per granted stream: its fields (type, text or binary, role), which fields "
        "search looks at, what query_records may filter on (operators per field), the order "
        "field with its oldest and newest values, the visible record count and last write.",
        input_schema=TOOL_INPUTS["schema"],
        annotations=_ANNOTATIONS,
    ),
    types.Tool(
        name="query_records",
        title="List a stream's records",
        description="A stream's records, newest first by its order field, narrowed by a filter "
        "(who, when, what), one card per record (title, time, actor, ...) with the fetch call "
        "that opens it. count='exact' adds the number that match; changes_since lists what "
        "changed since a bookmark. " + _LADDER,
        input_schema=TOOL_INPUTS["query_records"],
        annotations=_ANNOTATIONS,
    ),
]

RESOURCE_TEMPLATES: list[types.ResourceTemplate] = [
    types.ResourceTemplate(
        name="record",
        uri_template="pdpp://record/{handle}",
        description="One record, as fetch shows it.",
        mime_type="text/plain",
    ),
    types.ResourceTemplate(
        name="field-window",
        uri_template="pdpp://field-window/{handle}",
        description="A bounded window of one field: its text; offsets and the next/previous "
        "window URIs in _meta.",
        mime_type="text/plain",
    ),
    types.ResourceTemplate(
        name="blob",
        uri_template="pdpp://blob/{handle}",
        description="A blob's metadata (JSON); never its bytes.",
        mime_type="application/json",
    ),
]
