"""Cards as text for a reader that sees nothing else (an agent's `content[]`, `--format text`).

Every function takes a card's JSON rendering (`to_dict()`) and returns a string whose first line
is a compact JSON header and whose rest is what the card shows. The surfaces pass `call`, which
turns a continuation (`Continuation.to_dict()`) into the call a reader of that surface makes
(an MCP tool call, a command line), or `None` when the surface has no call for it.

Rules:
1. Self-sufficient: whatever a card omits, truncates or names is followed by the exact call that
   reads it, so a reader of the text alone never meets a dead end.
2. Exact: a window's text follows its header line verbatim, after the first newline, so pieces
   can be joined back into the field by their ranges. Everything else is one JSON object per
   line (compact, non-ASCII kept), so no stored text can pass for structure.
3. Honest: a JSON `null` is said to have no value (never the text "null"); a metadata-only
   (binary) field shows its metadata and never its bytes; a search hit without proven evidence
   says so and shows no text.
4. Bounded: a record is shown a page of fields at a time (`page_record`), at most
   `RECORD_BUDGET_CHARS` of rendered fields per page, with the call for the next page.
5. No surface here: no tool names, no routes; those come from `call`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeVar

from pdpp_store._core.identity import FieldWindowRef, RecordRef, parse_record_ref
from pdpp_store._core.values import json_type

T = TypeVar("T")

__all__ = [
    "METADATA_ONLY_NOTE",
    "NO_EVIDENCE_NOTE",
    "NULL_NOTE",
    "RECORD_BUDGET_CHARS",
    "CallFormatter",
    "RecordPage",
    "aggregate_text",
    "blob_text",
    "compact",
    "error_text",
    "kept_by_names",
    "page_record",
    "record_argument",
    "record_page_continuation",
    "record_text",
    "records_text",
    "schema_text",
    "search_text",
    "window_continuations",
    "window_text",
]

CallFormatter = Callable[[Mapping[str, Any]], Mapping[str, Any] | None]
"""A continuation (`Continuation.to_dict()`) to the call that performs it on one surface."""

RECORD_BUDGET_CHARS = 48_000
"""Rendered field lines per page of a record: a wide record comes back in several pages."""

NULL_NOTE = "JSON null: the field holds no value"
METADATA_ONLY_NOTE = "binary: metadata only, its bytes are not shown"
NO_EVIDENCE_NOTE = "metadata only: no text match was proven in a field you can read"


def compact(value: Any) -> str:
    """One line of JSON: no spaces, non-ASCII kept, newlines escaped."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def kept_by_names(make: Callable[[str, str, str], T]) -> Callable[[str, str, str], T]:
    """`make(connection_id, stream, record_id)`, kept for the last 4,096 records by their three
    names when they are strings (the library's always are): a card names its record several
    times. Errors are never kept, and names that are not strings are made (or refused, as
    `make` refuses them) afresh each time, never a `TypeError` from the keeping."""
    kept = lru_cache(maxsize=4096)(make)

    def made(connection_id: str, stream: str, record_id: str) -> T:
        if type(connection_id) is str and type(stream) is str and type(record_id) is str:
            return kept(connection_id, stream, record_id)
        return make(connection_id, stream, record_id)

    return made


def record_argument(connection_id: str, stream: str, record_id: str) -> str:
    """How a continuation names a record: its self-contained id, or its `pdpp://record/` URI when
    the id would not parse back to the same record (a stream holding ':'); once per record
    (`kept_by_names`)."""
    return _kept_argument(connection_id, stream, record_id)


def _argument(connection_id: str, stream: str, record_id: str) -> str:
    ref = RecordRef(connection_id, stream, record_id)
    return ref.id if parse_record_ref(ref.id) == ref else ref.uri


_kept_argument = kept_by_names(_argument)


# ---------------------------------------------------------------- windows


def _window_read(window: Mapping[str, Any], cursor: str | None) -> dict[str, Any] | None:
    if cursor is None:
        return None
    ref = RecordRef(window["connection_id"], window["stream"], window["record_id"])
    path = window["field"]["path"]
    arguments = {
        "record": record_argument(ref.connection_id, ref.stream, ref.record_id),
        "field": path,
        "cursor": cursor,
    }
    uri = FieldWindowRef(ref, path, cursor=cursor).uri
    return {"operation": "read_field_window", "arguments": arguments, "resource_uri": uri}


def window_continuations(
    window: Mapping[str, Any],
) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """The continuations of a window card that read the next and the previous windows."""
    body = window["window"]
    after = window.get("next", _window_read(window, body["next_cursor"]))
    before = window.get("previous", _window_read(window, body["previous_cursor"]))
    return after, before


def _optional_call(call: CallFormatter, continuation: Mapping[str, Any] | None) -> Any:
    return None if continuation is None else call(continuation)


def window_text(window: Mapping[str, Any], call: CallFormatter) -> str:
    """A field window: the header line, then the window's text verbatim."""
    body, field = window["window"], window["field"]
    after, before = window_continuations(window)
    header: dict[str, Any] = {
        "id": record_argument(window["connection_id"], window["stream"], window["record_id"]),
        "field_path": field["path"],
        "type": field["type"],
        "range": [body["start_chars"], body["end_chars"]],
        "total_chars": body["total_chars"],
        "complete": body["complete"],
    }
    if body["match_start_chars"] is not None:
        header["match"] = [body["match_start_chars"], body["match_end_chars"]]
    header["next"] = _optional_call(call, after)
    header["previous"] = _optional_call(call, before)
    warnings = window.get("meta", {}).get("warnings") or []
    if warnings:
        header["warnings"] = warnings
    if field["type"] == "null":
        header["note"] = NULL_NOTE
        return compact(header) + "\n"
    text: str = body["text"]
    return compact(header) + "\n" + text


# ---------------------------------------------------------------- records


@dataclass(frozen=True, slots=True)
class RecordPage:
    """Some of a record's fields (in path order), from `offset`, and where the next page starts."""

    record: dict[str, Any]
    """The record card with only this page's fields in `data` and `content_ladder`."""
    total: int
    offset: int
    shown: int
    lines: tuple[dict[str, Any], ...]
    """One line per shown field, continuations still as the card gives them."""

    @property
    def next_offset(self) -> int | None:
        end = self.offset + self.shown
        return end if end < self.total else None

    @property
    def after_field(self) -> str | None:
        """The path the card's page of fields starts after (a wide record's later page)."""
        after: str | None = self.record.get("after_field")
        return after


def _field_line(path: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """What a reader is told about one field of a record card."""
    ladder = record.get("content_ladder", {}).get(path)
    data = record.get("data", {})
    if ladder is None:
        value = data[path]
        if value is None:
            return {"field": path, "type": "null", "complete": True, "note": NULL_NOTE}
        if isinstance(value, str):
            return {
                "field": path,
                "type": "string",
                "size_chars": len(value),
                "complete": True,
                "text": value,
            }
        return {"field": path, "type": json_type(value), "complete": True, "value": value}
    line: dict[str, Any] = {"field": path, "type": ladder["type"]}
    if ladder["preview_status"] == "truncated":
        shown = ladder.get("preview_chars", 0)
        line.update(size_chars=ladder["size_chars"], complete=False, range=[0, shown])
        if path in data and isinstance(data[path], str):
            line["text"] = data[path]
        elif ladder.get("preview") is not None:
            line["preview"] = ladder["preview"]
        if ladder.get("item_count") is not None:
            line["item_count"] = ladder["item_count"]
        line["digest"] = ladder["digest"]
        line["next"] = ladder.get("read")
        return line
    line["metadata_only"] = ladder.get("binary_kind", ladder["preview_status"])
    for key in ("mime_type", "size_bytes", "digest", "blob_id"):
        if ladder.get(key) is not None:
            line[key] = ladder[key]
    export = ladder.get("export_uri")
    if export is not None:
        line["blob"] = {
            "operation": "blob_info",
            "arguments": {"blob_id": ladder["blob_id"]},
            "resource_uri": export,
        }
    line["note"] = METADATA_ONLY_NOTE
    return line


def page_record(
    record: Mapping[str, Any], offset: int = 0, budget: int = RECORD_BUDGET_CHARS
) -> RecordPage:
    """The page of a record card's fields that starts at `offset` (at least one field, then as
    many as fit in `budget` characters of rendered lines)."""
    paths = sorted({*record.get("data", {}), *record.get("content_ladder", {})})
    start = min(max(offset, 0), len(paths))
    lines: list[dict[str, Any]] = []
    used = 0
    for path in paths[start:]:
        line = _field_line(path, record)
        size = len(compact(line))
        if lines and used + size > budget:
            break
        lines.append(line)
        used += size
    chosen = {line["field"] for line in lines}
    pruned = dict(record)
    pruned["data"] = {k: v for k, v in record.get("data", {}).items() if k in chosen}
    pruned["content_ladder"] = {
        k: v for k, v in record.get("content_ladder", {}).items() if k in chosen
    }
    return RecordPage(pruned, len(paths), start, len(lines), tuple(lines))


def record_page_continuation(page: RecordPage) -> dict[str, Any] | None:
    """The continuation that reads the next page of fields, if there is one, in the library's
    own arguments: when the card's fields did not all fit, `read_record` after the last field
    shown (the library's next page starts there, with the card's narrowing `fields` kept);
    otherwise the card's own `next` (a wide record's next page)."""
    record = page.record
    if page.next_offset is None:
        following: dict[str, Any] | None = record.get("next")
        return following
    argument = record_argument(record["connection_id"], record["stream"], record["record_id"])
    arguments: dict[str, Any] = {"record": argument, "after_field": page.lines[-1]["field"]}
    if record.get("fields") is not None:
        arguments["fields"] = list(record["fields"])
    return {"operation": "read_record", "arguments": arguments, "resource_uri": None}


def record_text(page: RecordPage, call: CallFormatter) -> str:
    """A page of a record: the header line, then one line per field."""
    record = page.record
    header = {
        "id": record_argument(record["connection_id"], record["stream"], record["record_id"]),
        "stream": record["stream"],
        "revision": record["revision"],
        "fields": page.total,
        "shown": [page.offset, page.offset + page.shown],
        "next": _optional_call(call, record_page_continuation(page)),
    }
    out = [compact(header)]
    for line in page.lines:
        rendered = dict(line)
        for key in ("next", "blob"):
            if key in rendered:
                rendered[key] = _optional_call(call, rendered[key])
        out.append(compact(rendered))
    return "\n".join(out)


# ---------------------------------------------------------------- search, schema, blobs, errors


_SLOTS = ("title", "time", "actor", "secondary", "amount")


def _card_slots(card: Mapping[str, Any] | None) -> dict[str, Any]:
    """A record card's filled slots as `slot: value` (a `query_records` line shows the same)."""
    return {slot: card[slot]["value"] for slot in _SLOTS if card and slot in card}


def search_text(page: Mapping[str, Any], call: CallFormatter) -> str:
    """A page of search hits: the header line (with the call that reads the next page, the
    page's `next`), then per hit one line per proven excerpt (the evidence first, then where it
    is and the call that reads around it), or one line saying that only metadata matched. A
    hit's first line also shows its score and its record card's slots."""
    hits = page["data"]
    header = {
        "results": len(hits),
        "has_more": page["has_more"],
        "next": _optional_call(call, page.get("next")),
    }
    if "count" in page:
        header["count"] = page["count"]["value"]
    out = [compact(header)]
    for hit in hits:
        excerpts = hit.get("evidence_excerpts") or []
        if not excerpts:
            fetch = {
                "operation": "read_record",
                "arguments": {"record": hit["id"]},
                "resource_uri": None,
            }
            line = {
                "id": hit["id"],
                **_card_slots(hit.get("card")),
                "metadata_only": True,
                "note": NO_EVIDENCE_NOTE,
                "fetch": call(fetch),
            }
            out.append(compact(line))
            continue
        for number, excerpt in enumerate(excerpts):
            line = {
                "evidence": excerpt["preview_text"],
                "id": hit["id"],
                "score": hit.get("score"),
                **(_card_slots(hit.get("card")) if number == 0 else {}),
                "field_path": excerpt["field_path"],
                "match": [excerpt["match_start_chars"], excerpt["match_end_chars"]],
                "range": [excerpt["start_chars"], excerpt["end_chars"]],
                "total_chars": excerpt["total_chars"],
                "read": call(excerpt["read"]),
            }
            out.append(compact(line))
    return "\n".join(out)


def schema_text(schema: Mapping[str, Any], call: CallFormatter | None = None) -> str:
    """What a grant lets a reader see and ask: the header line, then one line per stream (its
    figures, the order field and its bounds, what filters take, its fields as `[path, type,
    text|binary, role]`), each with the call that lists the stream's records."""
    streams = schema.get("streams", [])
    header: dict[str, Any] = {"grant_id": schema.get("grant_id"), "streams": len(streams)}
    if schema.get("has_more"):
        following = schema.get("next")
        header["has_more"] = True
        header["next"] = call(following) if call is not None and following else following
    out = [compact(header)]
    for stream in streams:
        line: dict[str, Any] = {
            "stream": stream["name"],
            "connections": stream.get("connection_ids", []),
            "records": stream.get("record_count"),
            "last_written_at": stream.get("last_written_at"),
            "order": stream.get("order"),
            "searchable": stream.get("searchable_fields", []),
            "filters": stream.get("filters", {}),
            "fields": [
                [f["path"], f["type"], "text" if f["text_like"] else "binary"]
                + ([f["role"]] if f.get("role") else [])
                for f in stream.get("fields", [])
            ],
        }
        aggregations = stream.get("aggregations")
        if aggregations and (aggregations.get("count") or len(aggregations) > 1):
            line["aggregations"] = aggregations
        if stream.get("views"):
            line["views"] = [view["id"] for view in stream["views"]]
        if call is not None and stream.get("connection_ids"):
            listing = {
                "operation": "query_records",
                "arguments": {"stream": stream["name"]},
                "resource_uri": None,
            }
            line["list"] = call(listing)
        out.append(compact(line))
    return "\n".join(out)


def records_text(page: Mapping[str, Any], call: CallFormatter) -> str:
    """A page of `query_records`: the header line (order, count, the call for the next page,
    the changes bookmark), then one line per record card: its slots, its projected fields
    (a cut value as its preview, with the call that reads on, under `more`) and the call that
    opens the whole record (`fetch`); a deleted record (changes pages) is its id and
    `deleted`."""
    rows = page["data"]
    header: dict[str, Any] = {
        "stream": page["stream"],
        "results": len(rows),
        "order": page["order"],
        "has_more": page["has_more"],
        "next": _optional_call(call, page.get("next")),
    }
    if "count" in page:
        header["count"] = page["count"]["value"]
    if "next_changes_since" in page:
        header["next_changes_since"] = page["next_changes_since"]
    out = [compact(header)]
    for row in rows:
        if row.get("deleted"):
            out.append(compact({"id": row["id"], "deleted": True}))
            continue
        line: dict[str, Any] = {"id": row["id"]}
        line.update(_card_slots(row))
        line["fields"] = dict(row.get("data", {}))
        more: dict[str, Any] = {}
        for path, ladder in row.get("content_ladder", {}).items():
            read = ladder.get("read")
            if read is not None:
                more[path] = {"size_chars": ladder.get("size_chars"), "read": call(read)}
            else:
                more[path] = {"metadata_only": ladder.get("binary_kind", ladder["preview_status"])}
        if more:
            line["more"] = more
        line["fetch"] = call(row["read"])
        out.append(compact(line))
    return "\n".join(out)


def blob_text(blob: Mapping[str, Any]) -> str:
    """A blob's metadata (its bytes are never shown as text)."""
    return compact({**blob, "note": METADATA_ONLY_NOTE})


def error_text(envelope: Mapping[str, Any]) -> str:
    """An error: its envelope, on one line."""
    return compact(envelope)


def aggregate_text(card: Mapping[str, Any], call: CallFormatter) -> str:
    """An aggregate as text: the header line (what was asked, and the value or the number of
    groups and `other_count`), then one line per group, `key | value | records`, with the call
    that lists the group's records on that surface (when there is one)."""
    head = {key: value for key, value in card.items() if key not in ("groups", "object")}
    if "groups" not in card:
        return compact({"object": "aggregate", **head})
    groups = card["groups"]
    out = [compact({"object": "aggregate", **head, "groups": len(groups)})]
    out.append("key | value | records | records_call")
    for group in groups:
        listed = group.get("query")
        shown = None if listed is None else call(listed)
        cells = [compact(group["key"]), compact(group["value"]), str(group["records"])]
        out.append(" | ".join([*cells, compact(shown) if shown is not None else "-"]))
    if card.get("other_count"):
        out.append(f"(other groups) | - | {card['other_count']} | -")
    return "\n".join(out)
