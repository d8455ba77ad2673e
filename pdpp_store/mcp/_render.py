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
5. ChatGPT-style hosts (docs/contract.md §14) read `search`'s structured `results` as
   `[{id, title, url}]` and `fetch`'s as `{id, title, text, url, metadata}`; both are there
   beside the ladder's own keys (`ChatGPT-shape`, below). `id` is what `fetch` takes back;
   `title` is the record card's title (its declared `primary-title` field, under the grant,
   bounded) or else the id; `text` is what content[] shows, already bounded (a record's first
   page of fields, each long value as its first window with the call that continues it; a
   window's text with its continuation in `metadata`); `url` is the REST address of the record
   (or window, or blob) when the server knows its public base URL, else the `pdpp://` URI.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

import mcp_types as types

from pdpp_store import FieldWindow, FieldWindowRef, RecordRef, StoreError
from pdpp_store.evidence import text as evidence_text

from .calls import as_tool_call

__all__ = [
    "INTERNAL_ERROR",
    "blob_contents",
    "blob_result",
    "card_title",
    "error_result",
    "record_contents",
    "record_result",
    "records_result",
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
    ref = _window_record(window.connection_id, window.stream, window.record_id)
    return FieldWindowRef(ref, window.field.path, **selector).uri


_window_record = evidence_text.kept_by_names(RecordRef)
"""A window's record, checked once per record: a window's answer names it three times."""


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


def window_result(
    window: FieldWindow, q: str | None = None, *, fetched: FetchShape | None = None
) -> types.CallToolResult:
    """A window as `read_record_field` answers it; as `fetch` answers it (`fetched`), also in
    the ChatGPT shape (rule 5)."""
    structured = window_structured(window, q)
    content: list[Any] = [_text(evidence_text.window_text(window.to_dict(), as_tool_call))]
    resource = structured["resource"]
    if resource["next_uri"] is not None:
        content.append(_link(resource["next_uri"], "next window", "The window after this one."))
    if resource["previous_uri"] is not None:
        content.append(
            _link(resource["previous_uri"], "previous window", "The window before this one.")
        )
    if fetched is not None:
        record = structured["record"]
        url = fetched.window_url(window) or resource["uri"]
        structured.update(
            fetched.shape(
                record["id"],
                None,
                structured["window"]["text"],
                url,
                {
                    "object": "field_window",
                    **record,
                    "field": structured["field"],
                    "range": [window.start_chars, window.end_chars],
                    "complete": window.complete,
                    "next": _window_call(window, window.next_cursor),
                    "previous": _window_call(window, window.previous_cursor),
                },
            )
        )
    return types.CallToolResult(content=content, structured_content=structured)


def _window_call(window: FieldWindow, cursor: str | None) -> dict[str, Any] | None:
    if cursor is None:
        return None
    record = evidence_text.record_argument(window.connection_id, window.stream, window.record_id)
    return {
        "tool": "read_record_field",
        "arguments": {"id": record, "field_path": window.field.path, "cursor": cursor},
    }


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


def record_result(record: Any, fetched: FetchShape | None = None) -> types.CallToolResult:
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
    text = evidence_text.record_text(page, as_tool_call)
    content: list[Any] = [_text(text)]
    for path, ladder in page.record.get("content_ladder", {}).items():
        uri = ladder.get("resource_uri") or (ladder.get("read") or {}).get("resource_uri")
        if uri:
            content.append(_link(uri, f"{path} (continued)", f"The rest of field {path!r}."))
    if fetched is not None:
        shown = page.record
        card = shown.get("card") or {}
        metadata = {
            "object": "record",
            "connection_id": shown["connection_id"],
            "stream": shown["stream"],
            "record_id": shown["record_id"],
            "uri": shown["uri"],
            "revision": shown["revision"],
            **{slot: card[slot] for slot in _CARD_SLOTS if slot in card},
            "next": structured["fields"]["next"],
        }
        url = fetched.record_url(shown) or shown["uri"]
        structured.update(fetched.shape(shown["id"], card_title(card), text, url, metadata))
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


def blob_result(blob: Any, fetched: FetchShape | None = None) -> types.CallToolResult:
    card = {**blob.to_dict(), "uri": f"pdpp://blob/{blob.blob_id}"}
    text = evidence_text.blob_text(card)
    structured = dict(card)
    if fetched is not None:
        url = fetched.blob_url(blob.blob_id) or card["uri"]
        metadata = {"object": "blob", **card}
        structured.update(fetched.shape(card["uri"], None, text, url, metadata))
    return types.CallToolResult(content=[_text(text)], structured_content=structured)


def blob_contents(blob: Any, uri: str) -> types.ReadResourceResult:
    card = {**blob.to_dict(), "uri": uri}
    text = json.dumps(card, ensure_ascii=False)
    contents = types.TextResourceContents(uri=uri, mime_type="application/json", text=text)
    return types.ReadResourceResult(contents=[contents])


# ---------------------------------------------------------------- search, schema


def search_result(page: Any, base_url: str | None = None) -> types.CallToolResult:
    """A search page, each hit with its score and record card; with `results` in the ChatGPT
    shape (rule 5), each title its hit's card's."""
    card = page.to_dict()
    linked = FetchShape(base_url)
    card["results"] = [
        {
            "id": hit["id"],
            "title": card_title(hit.get("card")) or hit["id"],
            "url": linked.record_url(hit) or _record_uri(hit),
        }
        for hit in card["data"]
    ]
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
    text = evidence_text.schema_text(card, as_tool_call)
    for stream in card["streams"]:
        if stream["connection_ids"]:
            stream["list"] = {"tool": "query_records", "arguments": {"stream": stream["name"]}}
    card["next"] = None if card["next"] is None else as_tool_call(card["next"])
    return types.CallToolResult(content=[_text(text)], structured_content=card)


def records_result(page: Any) -> types.CallToolResult:
    """A `query_records` page: one line per card in `content[]`, then a resource link to each
    record and to the rest of each cut field; in `structuredContent` the page with every
    continuation as a ready tool call (each row's `fetch`, a cut field's `call`, the page's
    `next`)."""
    card = page.to_dict()
    content: list[Any] = [_text(evidence_text.records_text(card, as_tool_call))]
    for row in card["data"]:
        if row.get("deleted"):
            continue
        row["fetch"] = as_tool_call(row["read"])
        content.append(_link(row["uri"], row["id"], "The record."))
        for path, ladder in row.get("content_ladder", {}).items():
            read = ladder.get("read")
            if read is None:
                continue
            ladder["call"] = as_tool_call(read)
            if read.get("resource_uri"):
                described = f"The rest of field {path!r}."
                content.append(_link(read["resource_uri"], f"{row['id']} {path}", described))
    card["next"] = None if card["next"] is None else as_tool_call(card["next"])
    return types.CallToolResult(content=content, structured_content=card)


# ---------------------------------------------------------------- the ChatGPT shape (rule 5)

_CARD_SLOTS = ("title", "time", "actor", "secondary", "amount")


def card_title(card: Mapping[str, Any] | None) -> str | None:
    """The title a record card shows (its `primary-title` slot's value, as text), or None."""
    slot = (card or {}).get("title")
    if not isinstance(slot, Mapping):
        return None
    value = slot.get("value")
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _record_uri(hit: Mapping[str, Any]) -> str:
    return RecordRef(
        hit["connection_id"], hit["stream"], hit.get("record_id") or hit["record_key"]
    ).uri


class FetchShape:
    """Builds the ChatGPT-shape keys of a result; `base_url` is the server's public base URL
    (None: it knows none, so each `url` is a `pdpp://` URI)."""

    def __init__(self, base_url: str | None) -> None:
        self.base_url = None if base_url is None else base_url.rstrip("/")

    @staticmethod
    def shape(
        ident: str, title: str | None, text: str, url: str, metadata: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "id": ident,
            "title": title or ident,
            "text": text,
            "url": url,
            "metadata": metadata,
        }

    def _path(self, *parts: str) -> str:
        assert self.base_url is not None
        return self.base_url + "/v1/" + "/".join(quote(part, safe="") for part in parts)

    def record_url(self, record: Mapping[str, Any]) -> str | None:
        """The REST URL of a record (a record card, view or search hit), or None."""
        if self.base_url is None:
            return None
        record_id = record.get("record_id") or record["record_key"]
        path = self._path("streams", record["stream"], "records", record_id)
        return path + "?" + urlencode({"connection_id": record["connection_id"]})

    def window_url(self, window: FieldWindow) -> str | None:
        if self.base_url is None:
            return None
        path = self._path("streams", window.stream, "records", window.record_id, "field-window")
        query = {
            "connection_id": window.connection_id,
            "field": window.field.path,
            "offset_chars": window.start_chars,
            "limit_chars": window.limit_chars,
        }
        return path + "?" + urlencode(query)

    def blob_url(self, blob_id: str) -> str | None:
        return None if self.base_url is None else self._path("blobs", blob_id)
