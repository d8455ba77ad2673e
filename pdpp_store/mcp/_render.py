"""Cards as MCP results: `content[]` text, `structuredContent`, resource links, resource contents.

Rules:
1. The text of `content[0]` is `pdpp_store.evidence.text`'s rendering with `as_tool_call`: the
   CLI's `--format text` shows the same.
2. `structuredContent` carries the same facts for a reader that sees nothing else, with every
   continuation as a ready tool call; a window's is exactly read_record_field's published output
   shape (docs/contract.md §10).
3. Resource links name the `pdpp://` URI of each continuation that has one, for hosts that read
   resources; the text never depends on them.
4. An error is an `isError` result whose `content[]` text is the error envelope (docs/contract.md
   §7) and whose `_meta` holds the same envelope's `error` object (under `error`, beside what
   the SDK adds there, such as the 2026 protocol's server info). It has no `structuredContent`: a
   tool's `outputSchema` describes its success, and clients that validate `structuredContent`
   against it even on errors (the TypeScript SDK 1.x, the MCP Inspector) would throw the envelope
   away. Nothing an exception says reaches the client unless it is a `StoreError` (whose messages
   are safe by the store's own rule).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from pdpp_store import FieldWindow, FieldWindowRef, RecordRef, StoreError
from pdpp_store.evidence import text as evidence_text

from .calls import as_tool_call

__all__ = [
    "INTERNAL_ERROR",
    "blob_contents",
    "blob_result",
    "error_result",
    "record_contents",
    "record_result",
    "schema_result",
    "search_result",
    "window_contents",
    "window_result",
]

INTERNAL_ERROR: dict[str, Any] = {
    "error": {
        "type": "api_error",
        "code": "internal_error",
        "message": "the server failed to answer this request; nothing was changed",
    }
}

_TEXT_MIME = {"string": "text/plain; charset=utf-8"}


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _link(uri: str, name: str, description: str) -> types.ResourceLink:
    return types.ResourceLink(type="resource_link", uri=uri, name=name, description=description)


def error_result(error: StoreError | Mapping[str, Any]) -> types.CallToolResult:
    envelope = error.to_dict() if isinstance(error, StoreError) else dict(error)
    return types.CallToolResult(
        content=[_text(evidence_text.error_text(envelope))], is_error=True, _meta=envelope
    )


# ---------------------------------------------------------------- windows


def _window_uri(window: FieldWindow, **selector: Any) -> str:
    ref = RecordRef(window.connection_id, window.stream, window.record_id)
    return FieldWindowRef(ref, window.field.path, **selector).uri


def _neighbour_uri(window: FieldWindow, cursor: str | None) -> str | None:
    return None if cursor is None else _window_uri(window, cursor=cursor)


def window_structured(window: FieldWindow, q: str | None) -> dict[str, Any]:
    """Seed 000's structured output of `read_record_field`."""
    field = window.field
    match: dict[str, Any] | None = None
    if window.match_start_chars is not None:
        match = {"start_chars": window.match_start_chars, "end_chars": window.match_end_chars}
        if q is not None:
            match = {"q": q, **match}
    described: dict[str, Any] = {
        "path": field.path,
        "mime_type": _TEXT_MIME.get(field.json_type, "application/json"),
        "text_like": field.text_like,
        "size_chars": field.size_chars,
        "digest": field.digest,
    }
    return {
        "record": {
            "id": evidence_text.record_argument(
                window.connection_id, window.stream, window.record_id
            ),
            "connection_id": window.connection_id,
            "stream": window.stream,
            "record_id": window.record_id,
        },
        "field": described,
        "window": {
            "text": "" if field.json_type == "null" else window.text,  # null holds no text
            "start_chars": window.start_chars,
            "end_chars": window.end_chars,
            "limit_chars": window.limit_chars,
            "complete": window.complete,
            "next_cursor": window.next_cursor,
            "previous_cursor": window.previous_cursor,
            "match": match,
        },
        "resource": {
            "uri": _window_uri(
                window, offset_chars=window.start_chars, limit_chars=window.limit_chars
            ),
            "next_uri": _neighbour_uri(window, window.next_cursor),
            "previous_uri": _neighbour_uri(window, window.previous_cursor),
        },
    }


def window_result(window: FieldWindow, q: str | None = None) -> types.CallToolResult:
    structured = window_structured(window, q)
    content: list[Any] = [_text(evidence_text.window_text(window.to_dict(), as_tool_call))]
    resource = structured["resource"]
    if resource["next_uri"] is not None:
        content.append(_link(resource["next_uri"], "next window", "The window after this one."))
    if resource["previous_uri"] is not None:
        content.append(
            _link(resource["previous_uri"], "previous window", "The window before this one.")
        )
    return types.CallToolResult(content=content, structured_content=structured)


def window_contents(window: FieldWindow, uri: str) -> types.ReadResourceResult:
    """A field-window resource: the window's text, and where it lies in `_meta`."""
    card = window.to_dict()
    body = card["window"]
    meta = {
        "id": evidence_text.record_argument(window.connection_id, window.stream, window.record_id),
        "field_path": window.field.path,
        "start_chars": body["start_chars"],
        "end_chars": body["end_chars"],
        "total_chars": body["total_chars"],
        "complete": body["complete"],
        "match_start_chars": body["match_start_chars"],
        "match_end_chars": body["match_end_chars"],
        "next_uri": _neighbour_uri(window, window.next_cursor),
        "previous_uri": _neighbour_uri(window, window.previous_cursor),
    }
    text = window.text
    if window.field.json_type == "null":
        text, meta["note"] = "", evidence_text.NULL_NOTE
    mime = _TEXT_MIME.get(window.field.json_type, "application/json")
    contents = types.TextResourceContents(uri=uri, mime_type=mime, text=text, _meta=meta)
    return types.ReadResourceResult(contents=[contents])


# ---------------------------------------------------------------- records, blobs


def _record_page(record: Any) -> evidence_text.RecordPage:
    return evidence_text.page_record(record.to_dict())


def record_result(record: Any) -> types.CallToolResult:
    page = _record_page(record)
    following = evidence_text.record_page_continuation(page)
    structured = {
        "record": page.record,
        "fields": {
            "total": page.total,
            "offset": page.offset,
            "shown": page.shown,
            "next": None if following is None else as_tool_call(following),
        },
        "calls": {
            line["field"]: as_tool_call(line["next"])
            for line in page.lines
            if line.get("next") is not None
        },
    }
    content: list[Any] = [_text(evidence_text.record_text(page, as_tool_call))]
    for path, ladder in page.record.get("content_ladder", {}).items():
        uri = ladder.get("resource_uri") or (ladder.get("read") or {}).get("resource_uri")
        if uri:
            content.append(_link(uri, f"{path} (continued)", f"The rest of field {path!r}."))
    return types.CallToolResult(content=content, structured_content=structured)


def record_contents(record: Any, uri: str) -> types.ReadResourceResult:
    page = _record_page(record)
    following = evidence_text.record_page_continuation(page)
    meta = {
        "fields": page.total,
        "shown": [page.offset, page.offset + page.shown],
        "next": None if following is None else as_tool_call(following),
    }
    text = evidence_text.record_text(page, as_tool_call)
    contents = types.TextResourceContents(uri=uri, mime_type="text/plain", text=text, _meta=meta)
    return types.ReadResourceResult(contents=[contents])


def blob_result(blob: Any) -> types.CallToolResult:
    card = {**blob.to_dict(), "uri": f"pdpp://blob/{blob.blob_id}"}
    return types.CallToolResult(
        content=[_text(evidence_text.blob_text(card))], structured_content=card
    )


def blob_contents(blob: Any, uri: str) -> types.ReadResourceResult:
    card = {**blob.to_dict(), "uri": uri}
    text = json.dumps(card, ensure_ascii=False)
    contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
    return types.ReadResourceResult(contents=[contents])


# ---------------------------------------------------------------- search, schema


def search_result(page: Any) -> types.CallToolResult:
    card = page.to_dict()
    content: list[Any] = [_text(evidence_text.search_text(card, as_tool_call))]
    for hit in card["data"]:
        for excerpt in hit.get("evidence_excerpts") or []:
            excerpt["call"] = as_tool_call(excerpt["read"])
            uri = excerpt["read"].get("resource_uri")
            if uri:
                content.append(
                    _link(
                        uri,
                        f"{hit['id']} {excerpt['field_path']}",
                        f"The window of field {excerpt['field_path']!r} around the match.",
                    )
                )
    card["next"] = None if card["next"] is None else as_tool_call(card["next"])
    return types.CallToolResult(content=content, structured_content=card)


def aggregate_result(answer: Any) -> types.CallToolResult:
    """An aggregate: a compact table in `content[]`, the same numbers in `structuredContent`,
    each group with `call`, the tool call that lists its records (None where there is none)."""
    card = answer.to_dict()
    content: list[Any] = [_text(evidence_text.aggregate_text(card, as_tool_call))]
    for group in card.get("groups") or []:
        group["call"] = None if group["query"] is None else as_tool_call(group["query"])
    return types.CallToolResult(content=content, structured_content=card)


def schema_result(schema: Any) -> types.CallToolResult:
    card = schema.to_dict()
    return types.CallToolResult(
        content=[_text(evidence_text.schema_text(card))], structured_content=card
    )
